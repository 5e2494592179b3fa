//! The answer's way to the client, bounded in time at both ends.
//!
//! The query runs on a blocking thread and writes chunks into a channel
//! ([`ChanWriter`]); hyper reads them ([`Stream`]) and writes them to the
//! connection. A client that stops reading (a zero TCP window) fills the
//! socket, then the channel; the query's writer then waits, but only while
//! the query may still run: when its deadline passes (or it is stopped) the
//! write fails, the query ends and frees its slot. The connection itself is
//! bounded by [`WriteIdle`]: a write that makes no progress for that long
//! fails, hyper drops the connection and its slot.

use std::future::Future;
use std::io::{self, Write};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio::time::Sleep;

/// Bytes of one chunk of an answer.
pub const CHUNK: usize = 256 << 10;
/// Chunks of the answer queued towards a client: the query waits beyond.
pub const CHUNKS: usize = 8;
/// How often a writer waiting for room looks at its stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The answer's body: chunks from the query's thread; a failure recorded
/// by that thread cuts the stream once the chunks before it are sent
/// (hyper then closes the connection without ending the chunked body, so
/// the client sees a failed transfer, not a short file).
pub struct Stream {
    rx: mpsc::Receiver<Bytes>,
    failed: Arc<OnceLock<String>>,
    /// Stops the query when the body is dropped ([`Stream::stops`]).
    _stop: Option<StopOnDrop>,
}

/// The sending half of a [`Stream`].
#[derive(Clone)]
pub struct Sender {
    tx: mpsc::Sender<Bytes>,
    failed: Arc<OnceLock<String>>,
}

/// A channel of `chunks` chunks from a query to its answer's body.
pub fn channel(chunks: usize) -> (Sender, Stream) {
    let (tx, rx) = mpsc::channel(chunks);
    let failed = Arc::new(OnceLock::new());
    (
        Sender {
            tx,
            failed: failed.clone(),
        },
        Stream {
            rx,
            failed,
            _stop: None,
        },
    )
}

impl Stream {
    /// Stops the query (`stop`) when the body is dropped: hyper drops it
    /// when the connection ends (the client went away, or the answer was
    /// sent), so a query whose client is gone stops at its next check
    /// instead of running on in its slot until it writes again or its time
    /// is up (a query that reads much and matches little writes rarely).
    pub fn stops(mut self, stop: StopOnDrop) -> Stream {
        self._stop = Some(stop);
        self
    }
}

/// Sets a query's stop flag when dropped, unless disarmed.
pub struct StopOnDrop(Option<Arc<AtomicBool>>);

impl StopOnDrop {
    /// Armed on `stop`.
    pub fn new(stop: Arc<AtomicBool>) -> StopOnDrop {
        StopOnDrop(Some(stop))
    }

    /// Dropped without setting the flag.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            s.store(true, Ordering::Relaxed);
        }
    }
}

impl Sender {
    /// Queues `b` if there is room now (a short answer made in one piece).
    pub fn try_send(&self, b: Bytes) {
        let _ = self.tx.try_send(b);
    }

    /// Cuts the stream after what is queued, once the last copy of the
    /// sender is gone. Never waits: a client that does not read would hold
    /// the query's thread here otherwise.
    pub fn fail(self, why: String) {
        let _ = self.failed.set(why);
    }
}

impl Body for Stream {
    type Data = Bytes;
    type Error = io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(b)) => Poll::Ready(Some(Ok(Frame::data(b)))),
            Poll::Ready(None) => Poll::Ready(
                self.failed
                    .get()
                    .map(|why| Err(io::Error::other(why.clone()))),
            ),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Writes into the answer's channel from a blocking thread; fails once the
/// client is gone, or once `stop` is set while the client is not reading.
pub struct ChanWriter {
    tx: Sender,
    buf: Vec<u8>,
    stop: Arc<AtomicBool>,
    rt: tokio::runtime::Handle,
}

impl ChanWriter {
    /// A writer into `tx` that gives up waiting for room when `stop` is set
    /// (the query's deadline); `rt` is the runtime the channel lives on.
    pub fn new(tx: Sender, stop: Arc<AtomicBool>, rt: tokio::runtime::Handle) -> ChanWriter {
        ChanWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
            stop,
            rt,
        }
    }
}

impl Write for ChanWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        // Wait for room in short steps, looking at the stop flag between
        // them: an unbounded wait here is what let a client that never
        // reads hold its query (and the query's slot) forever.
        let permit = loop {
            if self.stop.load(Ordering::Relaxed) {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client stopped reading and the query's time ran out",
                ));
            }
            let tx = &self.tx.tx;
            // The timer is made inside the future: the runtime's context is
            // there (a thread outside the runtime has none of its own).
            let wait = async { tokio::time::timeout(STOP_CHECK, tx.reserve()).await };
            match self.rt.block_on(wait) {
                Ok(Ok(p)) => break p,
                Ok(Err(_)) => return Err(io::Error::new(io::ErrorKind::BrokenPipe, "client gone")),
                Err(_) => continue,
            }
        };
        permit.send(Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(CHUNK),
        )));
        Ok(())
    }
}

/// A connection whose writes fail after `idle` without progress: a peer
/// that stops reading would otherwise hold the connection (and its slot)
/// as long as it likes, since hyper waits for the socket without limit.
pub struct WriteIdle<T> {
    inner: T,
    idle: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteIdle<T> {
    /// `inner`, its writes bounded by `idle`.
    pub fn new(inner: T, idle: Duration) -> WriteIdle<T> {
        WriteIdle {
            inner,
            idle,
            timer: None,
        }
    }

    /// After the inner write returned `r`: progress clears the timer; no
    /// progress arms it (once) and fails when it has run out.
    fn watch<R>(&mut self, r: Poll<io::Result<R>>, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        if r.is_ready() {
            self.timer = None;
            return r;
        }
        let idle = self.idle;
        let t = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
        match t.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the peer read nothing for {} s", idle.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteIdle<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteIdle<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.watch(r, cx)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.watch(r, cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.watch(r, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A peer that reads nothing: the writer fails after the idle time
    /// instead of waiting forever; one that reads keeps it going.
    #[test]
    fn a_write_without_progress_fails_after_the_idle_time() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, _b) = tokio::io::duplex(1024);
            let mut w = WriteIdle::new(a, Duration::from_millis(200));
            let t = std::time::Instant::now();
            let mut sent = 0;
            let e = loop {
                match w.write(&[0u8; 512]).await {
                    Ok(n) => sent += n,
                    Err(e) => break e,
                }
            };
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
            assert_eq!(sent, 1024);
            let took = t.elapsed();
            assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(2));
        });
    }

    /// The query's writer gives up when its stop flag is set while the
    /// channel is full, and says the client is gone when it is.
    #[test]
    fn a_full_channel_waits_only_until_stopped() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (tx, rx) = channel(1);
        let stop = Arc::new(AtomicBool::new(false));
        let mut w = ChanWriter::new(tx, stop.clone(), rt.handle().clone());
        w.write_all(&[1u8; CHUNK]).unwrap();
        let s = stop.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            s.store(true, Ordering::Relaxed);
        });
        let t = std::time::Instant::now();
        let e = w.write_all(&[2u8; CHUNK]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t.elapsed() < Duration::from_secs(2));
        setter.join().unwrap();
        stop.store(false, Ordering::Relaxed);
        drop(rx);
        let e = w.write_all(&[3u8; CHUNK]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }
}
