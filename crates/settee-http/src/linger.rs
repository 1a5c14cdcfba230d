//! Lingering close: a connection's socket, which on close reads (and
//! drops) what the client is still sending before it lets go.
//!
//! When a server answers before reading a whole request body (an error
//! about the path or headers, a body over the limit) and closes the
//! connection with unread bytes in the kernel's receive buffer, or with
//! more arriving, the kernel answers them with a reset — and a reset
//! makes the client's kernel discard the response it had not read yet.
//! The client sees a cut response instead of the error.
//!
//! Invariants:
//! - closing sends FIN first (the response is complete on the wire),
//!   then reads until the client closes its side, an error, [`LINGER_MAX`]
//!   time or [`LINGER_BYTES_MAX`] bytes, whichever comes first; only then
//!   is the socket dropped. A client cannot hold a closing connection
//!   longer than [`LINGER_MAX`].
//! - reads and writes before the close pass through untouched.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{sleep, Sleep};

/// The longest a closing connection waits for the client to stop sending.
pub const LINGER_MAX: Duration = Duration::from_secs(2);

/// The most a closing connection reads (and drops).
pub const LINGER_BYTES_MAX: u64 = 64 << 20;

/// Where the close stands.
enum Closing {
    Open,
    /// FIN sent; reading until the client is done.
    Draining {
        deadline: Pin<Box<Sleep>>,
        read: u64,
    },
    Done,
}

/// A socket with a lingering close (see the module doc).
pub struct Linger<S> {
    inner: S,
    closing: Closing,
}

impl<S> Linger<S> {
    pub fn new(inner: S) -> Linger<S> {
        Linger {
            inner,
            closing: Closing::Open,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Linger<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Linger<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.closing {
                Closing::Open => {
                    let sent = ready!(Pin::new(&mut this.inner).poll_shutdown(cx));
                    if sent.is_err() {
                        this.closing = Closing::Done;
                        return Poll::Ready(sent);
                    }
                    this.closing = Closing::Draining {
                        deadline: Box::pin(sleep(LINGER_MAX)),
                        read: 0,
                    };
                }
                Closing::Draining { deadline, read } => {
                    if deadline.as_mut().poll(cx).is_ready() || *read >= LINGER_BYTES_MAX {
                        this.closing = Closing::Done;
                        continue;
                    }
                    let mut scratch = [0u8; 8192];
                    let mut buf = ReadBuf::new(&mut scratch);
                    match ready!(Pin::new(&mut this.inner).poll_read(cx, &mut buf)) {
                        Ok(()) if !buf.filled().is_empty() => *read += buf.filled().len() as u64,
                        // The client closed its side, or the socket failed.
                        _ => this.closing = Closing::Done,
                    }
                }
                Closing::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// The server answers without reading a large body and closes; the
    /// client, still sending, must read the whole answer.
    #[tokio::test]
    async fn the_answer_survives_an_unread_body() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answer = vec![b'x'; 200_000];
        let expected = answer.clone();
        let server = tokio::spawn(async move {
            let (sock, _) = listener.accept().await.unwrap();
            let mut sock = Linger::new(sock);
            let mut head = [0u8; 16];
            sock.read_exact(&mut head).await.unwrap();
            sock.write_all(&answer).await.unwrap();
            sock.shutdown().await.unwrap();
        });
        let mut client = TcpStream::connect(addr).await.unwrap();
        let body = vec![b'b'; 8 << 20];
        let (mut rd, mut wr) = client.split();
        let send = async {
            // Fails once the server is gone; only the answer matters.
            let _ = wr.write_all(&body).await;
            let _ = wr.shutdown().await;
        };
        let recv = async {
            let mut got = Vec::new();
            rd.read_to_end(&mut got).await.map(|_| got)
        };
        let ((), got) = tokio::join!(send, recv);
        assert_eq!(got.unwrap(), expected);
        server.await.unwrap();
    }
}
