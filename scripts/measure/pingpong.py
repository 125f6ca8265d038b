"""Round trip of a 50-byte message between two threads over loopback TCP (TCP_NODELAY):
mostly the cost of waking a thread on this machine. Prints a figure; asserts nothing."""
import socket
import threading
import time

ROUNDS = 5000

listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)


def echo():
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(100):
        conn.sendall(data)


threading.Thread(target=echo, daemon=True).start()
client = socket.create_connection(listener.getsockname())
client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
start = time.perf_counter()
for _ in range(ROUNDS):
    client.sendall(b"x" * 50)
    client.recv(100)
print(f"loopback ping-pong, two threads: {(time.perf_counter() - start) / ROUNDS * 1e6:.0f} us")
