# cut_client.py PORT QUERY...: a q client with a small receive buffer that sends each QUERY as a
# sync char vector, prints "sent", reads nothing until a line comes on stdin (a line "send": it
# sends "echo after" too, prints "sent" and waits for the next), then reads to the close and prints "ok whole=T,T,... lens=N,N,... cut=B": the type and length of each whole
# message (its header checked; a char vector's length, its count), and the bytes of a message
# cut by the close.
import struct, sys
from qwire import Q, cv

q = Q(int(sys.argv[1]), rcvbuf=65536)  # (what the kernel holds for it: little)
for text in sys.argv[2:]:
    q.send(cv(text))
print("sent", flush=True)
while sys.stdin.readline().strip() == "send":  # one more message, left unread by qgate's side
    q.send(cv("echo after"))
    print("sent", flush=True)
data = q.rest()
if data[:1] != b"\3":
    sys.exit("no handshake byte")
at, types, lens = 1, [], []
while at + 8 <= len(data):
    t, n = data[at + 1], struct.unpack("<i", data[at + 4:at + 8])[0]
    if data[at] != 1 or t > 2 or data[at + 2] != 0 or n < 9:
        sys.exit("a bad header %s after %d messages" % (data[at:at + 8].hex(), len(types)))
    if at + n > len(data):
        break  # the one the close cut
    if data[at + 8] == 10 and struct.unpack("<i", data[at + 10:at + 14])[0] != n - 14:
        sys.exit("a char vector whose length is not its message's")
    types.append(t)
    lens.append(n - 14 if data[at + 8] == 10 else n)
    at += n
print("ok whole=%s lens=%s cut=%d" % (",".join(map(str, types)), ",".join(map(str, lens)), len(data) - at))
