"""common.http1: the one HTTP/1.1 fast path beside hypercorn, for the web and the cr-operator.

    head        the strict request-head parser: Head, INCOMPLETE, FOREIGN (h11 reads the same)
    wire        responses and chunked framing as h11 writes them; DateHeader
    limits      Limits (connections per worker and peer, head and body deadlines) and the Gate
    flags       the limits as command-line flags (`ykshm web`, `ykshm cr-operator`)
    connection  one connection while a direct path reads it: buffer, idle/head/body deadlines
    replay      ReplayStream: the bytes already read put back in front, for hypercorn
    listener    the worker's accept loop: Gate -> direct path -> hypercorn's TCPServer; `serve`;
                `tune` (TCP_NODELAY, TCP_USER_TIMEOUT on the listening sockets)
    routing     Route/Router, first full match wins, partial match -> 405, the app's own errors
    body        the ASGI request-body reader: size cap and deadline, the app's own errors
    lifespan    the ASGI lifespan of an app with nothing to start (`nothing_to_start`)
    tls         TLS on the fast path: server context (TlsFiles), handshake under the head deadline,
                TlsStream (a ciphertext backlog the hub can write without awaiting), hypercorn hand-over
    forwarded   TrustedProxies: X-Forwarded-For (rightmost untrusted) only from configured proxies

Where a request head is parsed: `head.parse`, called by `connection.Connection.next_head`.
"""
