/* version.h: qgate's version, for --version and the logs. */
#ifndef VERSION_H
#define VERSION_H

#define QG_VERSION "0.13.0"

#endif
