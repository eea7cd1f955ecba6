//! Connections that let HTTP/2 write many small frames in one system call.
//!
//! h2 writes a DATA frame whose payload is 256 bytes or more as its own `writev` entry when the
//! connection says it takes vectored writes, and then must flush before it can take the next
//! frame: one system call per frame. A node sends each watch event as a frame of a few hundred
//! bytes on one of many streams sharing a connection, so a write watched by 64 clients cost 64
//! or more `writev`s (strace: 1.1 per delivery). On a connection that declines vectored writes
//! h2 copies payloads below 1 KiB into its 16 KiB write buffer instead, and one write carries
//! the frames of every stream that had one ready; larger payloads are still written without a
//! copy. [`Coalescing`] is that connection: a TCP stream that says it prefers plain writes.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};

/// An accepted TCP connection that declines vectored writes (see the module's note).
pub struct Coalescing(TcpStream);

/// `incoming`'s connections, each as [`Coalescing`].
pub fn incoming(incoming: TcpIncoming) -> impl Stream<Item = io::Result<Coalescing>> {
    incoming.map(|accepted| accepted.map(Coalescing))
}

impl Connected for Coalescing {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.0.connect_info()
    }
}

impl AsyncRead for Coalescing {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Coalescing {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}
