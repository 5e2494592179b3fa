//! The retrieval service: HTTPS with a required client certificate,
//! `POST /query` in stenographer's language (so `stenoread`/`stenocurl`
//! work unchanged) and `POST /tcpdump?after=T&before=T` with a tcpdump
//! filter, both answering a pcap stream (nanosecond timestamps) of the
//! matching packets in time order, exactly what `ringcap query` writes.
//!
//! Everything a client sends is hostile until checked, and everything it
//! can make the server hold is bounded: connections (the TLS handshake
//! has a deadline, each address a few handshakes at once, and the oldest
//! handshake gives its slot up when all are taken, see [`crate::admit`];
//! one request per connection; at most the query's time and the write
//! bound in all), the request (head and
//! body sizes, read deadline), queries running at once (beyond: 503;
//! each reads the files ahead on at most 3 threads of its own holding at
//! most 32 MiB and 64 open files, `ringcap-index`'s `query/fetch.rs`),
//! the time a query may take (beyond: the stream is cut), and the bytes
//! it may answer: when the files in the window could hold more than the
//! limit, the query is first counted without output and refused with 413
//! if its answer is larger, so a client gets a clear error instead of a
//! silently short file. A client that goes away stops its query (the
//! answer's body, dropped with the connection, sets the query's stop flag,
//! which the query checks every 512 records, writing or not); so does one that stops reading once the query's time is up, and
//! its connection is dropped after [`Limits::write_idle`] without progress
//! (see [`crate::stream`]). Each request is logged with the client certificate's
//! fingerprint, the query, and what was answered.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use ringcap_index::query::Window;
use tokio::sync::{oneshot, Semaphore};

use crate::admit::{Handshakes, Refusals};
use crate::job::{self, Job, Programs, Refusal};
use crate::steno;
use crate::stream::{self, ChanWriter, StopOnDrop, Stream, WriteIdle, CHUNKS};

/// What the server may be made to hold.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Queries running at once (beyond: 503).
    pub queries: usize,
    /// Connections open at once (beyond: closed at once).
    pub connections: usize,
    /// Bytes of one answer (beyond: 413 before anything is sent).
    pub bytes: u64,
    /// Time of one query, counting and streaming (beyond: the stream is cut).
    pub time: Duration,
    /// Bytes of a request body (the query).
    pub request: usize,
    /// Time a write to a client may wait without progress (beyond: the
    /// connection is dropped; a client that stops reading holds nothing).
    pub write_idle: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            queries: 4,
            connections: 64,
            bytes: 4 << 30,
            time: Duration::from_secs(600),
            request: 16 << 10,
            // Long enough for a slow or lossy path (TCP's own retransmission
            // back-off reaches tens of seconds), short against 64 slots.
            write_idle: Duration::from_secs(60),
        }
    }
}

/// A running service's settings.
pub struct Service {
    /// Directories of capture files queried.
    pub dirs: Vec<PathBuf>,
    /// Bounds.
    pub limits: Limits,
    /// Where log lines go.
    pub log: Arc<dyn Fn(String) + Send + Sync>,
}

/// Time a TLS handshake may take: a client on the far side of the world
/// needs a few round trips; an idle connection holds a slot until then.
const HANDSHAKE: Duration = Duration::from_secs(3);
/// Connections one address (an IPv6 /64) may have in their handshake at
/// once (of the 64 slots), so that one address cannot take them all.
const HANDSHAKES_PER_PEER: usize = 8;
/// How long a newcomer waits for the slot an evicted handshake gives back.
const EVICTION_WAIT: Duration = Duration::from_millis(200);
/// Refused connections are logged at most this often (with a count).
const REFUSAL_LOG: Duration = Duration::from_secs(1);
const REQUEST_READ: Duration = Duration::from_secs(10);

/// Counts a connection refused (logged at most once per [`REFUSAL_LOG`]).
fn note_refusal(refused: &Mutex<Refusals>, why: String, log: &dyn Fn(String)) {
    refused
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .note(why, log)
}

/// Serves on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Arc<rustls::ServerConfig>,
    svc: Arc<Service>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let conns = Arc::new(Semaphore::new(svc.limits.connections));
    let queries = Arc::new(Semaphore::new(svc.limits.queries));
    let handshakes = Handshakes::default();
    // Connections refused before or in their handshake: one line a
    // second with a count, however many a client makes fail.
    let refused = Arc::new(Mutex::new(Refusals::new(REFUSAL_LOG)));
    loop {
        // Refusals not yet logged are logged when due, even if no other
        // connection comes (checked again at least once a second: a
        // handshake's task may have added one meanwhile).
        let due = refused.lock().unwrap_or_else(|e| e.into_inner()).due();
        let wake = due.unwrap_or_else(|| Instant::now() + REFUSAL_LOG);
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = tokio::time::sleep_until(wake.into()) => {
                let mut r = refused.lock().unwrap_or_else(|e| e.into_inner());
                if r.due().is_some_and(|d| d <= Instant::now()) {
                    r.flush(&*svc.log);
                }
                continue;
            }
        };
        let (tcp, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of descriptors, most likely: wait rather than spin.
                (svc.log)(format!("accept: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(handshaking) = handshakes.enter(peer.ip(), HANDSHAKES_PER_PEER) else {
            note_refusal(
                &refused,
                format!(
                    "{peer}: {HANDSHAKES_PER_PEER} connections from its address in their TLS handshake"
                ),
                &*svc.log,
            );
            continue;
        };
        let permit = match conns.clone().try_acquire_owned() {
            Ok(p) => Some(p),
            // Every slot taken: the oldest connection still in its
            // handshake (nothing is known of it yet) gives its slot up.
            Err(_) if handshakes.evict_oldest() => {
                tokio::time::timeout(EVICTION_WAIT, conns.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
            Err(_) => None,
        };
        let Some(permit) = permit else {
            note_refusal(
                &refused,
                format!("{peer}: {} connections open", svc.limits.connections),
                &*svc.log,
            );
            continue;
        };
        let id = handshaking.id();
        let (acceptor, svc, queries) = (acceptor.clone(), svc.clone(), queries.clone());
        let refused = refused.clone();
        let tcp = WriteIdle::new(tcp, svc.limits.write_idle);
        let task = tokio::spawn(async move {
            let _permit = permit;
            let tls = tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await;
            drop(handshaking);
            let tls = match tls {
                Ok(Ok(t)) => t,
                Ok(Err(e)) => {
                    note_refusal(&refused, format!("{peer}: TLS refused: {e}"), &*svc.log);
                    return;
                }
                Err(_) => {
                    note_refusal(
                        &refused,
                        format!("{peer}: TLS handshake timed out"),
                        &*svc.log,
                    );
                    return;
                }
            };
            let client = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map_or_else(|| "-".to_string(), |c| fingerprint(c));
            let who = Arc::new(format!("{peer} client {client}"));
            // A connection outlives its one query by little: the answer
            // cannot grow after the query's time, and what is queued must
            // drain within a write's idle bound. A client reading a byte now
            // and then (progress every time, so never idle) is cut here.
            let lifetime = REQUEST_READ + svc.limits.time + svc.limits.write_idle;
            let log = svc.log.clone();
            let service = hyper::service::service_fn(move |req| {
                let (svc, queries, who) = (svc.clone(), queries.clone(), who.clone());
                async move { Ok::<_, Infallible>(handle(req, &svc, &queries, &who).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(REQUEST_READ)
                .max_buf_size(16 << 10)
                .keep_alive(false)
                .serve_connection(TokioIo::new(tls), service);
            if tokio::time::timeout(lifetime, conn).await.is_err() {
                log(format!(
                    "{peer}: connection closed after {} s (its query's time and the write bound)",
                    lifetime.as_secs()
                ));
            }
        });
        handshakes.register(&id, task.abort_handle());
    }
}

fn fingerprint(c: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, c);
    d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A whole answer, or an error message.
fn text(status: StatusCode, msg: &str) -> Response<Stream> {
    let (tx, rx) = stream::channel(1);
    let body = Bytes::from(format!("{msg}\n"));
    let len = body.len();
    tx.try_send(body);
    let mut r = Response::new(rx);
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(CONTENT_LENGTH, HeaderValue::from(len));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        h.insert("retry-after", HeaderValue::from_static("1"));
    }
    r
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn header_u64(req: &Request<Incoming>, name: &str) -> Result<Option<u64>, String> {
    match req.headers().get(name) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .map(Some)
            .ok_or_else(|| format!("header {name}: not a number")),
    }
}

/// The `after`/`before` of `/tcpdump?after=T&before=T`.
fn window_of(query: Option<&str>) -> Result<Window, String> {
    let mut w = Window::default();
    for kv in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let v = v
            .replace("%3A", ":")
            .replace("%3a", ":")
            .replace("%2B", "+");
        let t = ringcap_index::time::parse_time(&v)?;
        match k {
            "after" => w.after = Some(t),
            "before" => w.before = Some(t),
            _ => return Err(format!("unknown parameter '{k}' (after, before)")),
        }
    }
    Ok(w)
}

async fn handle(
    req: Request<Incoming>,
    svc: &Arc<Service>,
    queries: &Arc<Semaphore>,
    who: &str,
) -> Response<Stream> {
    let path = req.uri().path().to_string();
    let steno = match (req.method(), path.as_str()) {
        (&Method::POST, "/query") => true,
        (&Method::POST, "/tcpdump") => false,
        (_, "/query" | "/tcpdump") => {
            return text(StatusCode::METHOD_NOT_ALLOWED, "use POST");
        }
        _ => {
            return text(
                StatusCode::NOT_FOUND,
                "POST /query (stenographer's language) or POST /tcpdump?after=T&before=T (a tcpdump filter)",
            )
        }
    };
    let bad = |status: StatusCode, msg: String| {
        (svc.log)(format!("{who}: {path}: {} {msg}", status.as_u16()));
        text(status, &msg)
    };
    let window = if steno {
        Window::default()
    } else {
        match window_of(req.uri().query()) {
            Ok(w) => w,
            Err(e) => return bad(StatusCode::BAD_REQUEST, e),
        }
    };
    let limit_packets = header_u64(&req, "steno-limit-packets");
    let limit_bytes = header_u64(&req, "steno-limit-bytes");
    let (limit_packets, limit_bytes) = match (limit_packets, limit_bytes) {
        (Ok(p), Ok(b)) => (p, b),
        (Err(e), _) | (_, Err(e)) => return bad(StatusCode::BAD_REQUEST, e),
    };
    let max = svc.limits.request;
    let body = Limited::new(req.into_body(), max);
    let body = match tokio::time::timeout(REQUEST_READ, body.collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(_)) => {
            return bad(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the query is longer than {max} bytes"),
            )
        }
        Err(_) => {
            return bad(
                StatusCode::REQUEST_TIMEOUT,
                "the query was not sent in time".into(),
            )
        }
    };
    let Ok(text_q) = std::str::from_utf8(&body) else {
        return bad(StatusCode::BAD_REQUEST, "the query is not UTF-8".into());
    };
    let (filter, window) = if steno {
        match steno::translate(text_q, now_ns()) {
            Ok(t) => (t.filter, t.window),
            Err(e) => return bad(StatusCode::BAD_REQUEST, format!("query '{text_q}': {e}")),
        }
    } else {
        (text_q.trim().to_string(), window)
    };
    // Measured in Rust before libpcap sees it (its compile time grows
    // steeply with the number of terms; see job::MAX_PRIMITIVES).
    if let Err(e) = job::check_size(&filter) {
        let what = if steno {
            "the query as a tcpdump filter ('ip proto N' is two terms there)"
        } else {
            "filter"
        };
        return bad(StatusCode::BAD_REQUEST, format!("{what}: {e}"));
    }
    // The slot first: whatever the query costs from here on (libpcap's
    // compile included) is counted against the limit of queries.
    let Ok(permit) = queries.clone().try_acquire_owned() else {
        return bad(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{} queries are running (the most at once); try again",
                svc.limits.queries
            ),
        );
    };
    let what = format!("{text_q:?} = '{filter}' {window:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let stop_for_gone = stop.clone();
    let deadline = {
        let stop = stop.clone();
        let t = svc.limits.time;
        tokio::spawn(async move {
            tokio::time::sleep(t).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let max_bytes = svc.limits.bytes;
    let job = Job {
        dirs: svc.dirs.clone(),
        filter,
        window,
        stop,
    };
    // Count first when the files in the window could answer more than the
    // limit (and the client did not ask for less).
    let count = limit_bytes.is_none_or(|b| b > max_bytes);
    // The server's own bound too: the file a capture is still writing may
    // have grown since the count (it is read up to its size when opened).
    let limits = (
        limit_packets,
        Some(limit_bytes.map_or(max_bytes, |b| b.min(max_bytes))),
    );
    let (tx, rx) = stream::channel(CHUNKS);
    let (head_tx, head_rx) = oneshot::channel();
    let log = svc.log.clone();
    let rt = tokio::runtime::Handle::current();
    let (who_s, what_s) = (who.to_string(), what.clone());
    // One blocking thread does all of the query: the compile (once, shared
    // by the count and the stream), the count, then the stream; the answer's
    // status comes back before the stream starts.
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let (who, what) = (who_s, what_s);
        let head = Programs::new(&job.filter)
            .map_err(|e| Refusal(StatusCode::BAD_REQUEST, e))
            .and_then(|mut p| {
                if count {
                    job.count(&mut p, max_bytes)?;
                }
                Ok(p)
            });
        let mut programs = match head {
            Ok(p) => p,
            Err(r) => {
                deadline.abort();
                let _ = head_tx.send(Err(r));
                return;
            }
        };
        if head_tx.send(Ok(())).is_err() {
            deadline.abort();
            return;
        }
        log(format!("{who}: {what}: streaming"));
        let started = Instant::now();
        // The writer's copy of the channel is gone when `stream` returns,
        // so `fail` below closes it (after recording why).
        let w = ChanWriter::new(tx.clone(), job.stop.clone(), rt);
        let r = job.stream(&mut programs, Box::new(w), limits);
        deadline.abort();
        let secs = started.elapsed().as_secs_f64();
        let compiles = programs.compiles;
        match r {
            Ok(sent) => {
                let (n, bytes) = (sent.packets, sent.bytes);
                log(format!(
                    "{who}: {what}: 200 {n} packets, {bytes} bytes, {secs:.3} s, {compiles} filter compile(s)"
                ));
                for d in sent.damaged {
                    log(format!("{who}: {what}: read in part: {d}"));
                }
            }
            Err(e) => {
                log(format!("{who}: {what}: cut after {secs:.3} s: {e}"));
                tx.fail(e);
            }
        }
    });
    // A client gone before the status is known (hyper drops this future)
    // stops the compile and count too, instead of leaving them to run out
    // their time in the slot.
    let gone = StopOnDrop::new(stop_for_gone.clone());
    let head = head_rx.await;
    gone.disarm();
    match head {
        Ok(Ok(())) => {}
        Ok(Err(Refusal(status, msg))) => return bad(status, format!("{what}: {msg}")),
        Err(_) => {
            return bad(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{what}: the query failed"),
            )
        }
    }
    // From here on the body stops the query when the connection ends.
    let mut r = Response::new(rx.stops(StopOnDrop::new(stop_for_gone)));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    r
}
