//! The retrieval service of issue 27: stored packets for other machines.
//!
//! - [`steno`]: stenographer's query language, as a tcpdump filter and a
//!   time window (so stenographer's clients work unchanged).
//! - [`server`]: HTTPS with client certificates, `POST /query` and
//!   `POST /tcpdump`, answered by `ringcap-index` (index + libpcap), bounded.
//! - [`stream`]: the answer's way to the client, bounded in time.
//! - [`job`]: one query's work: the filter bounded, compiled once, run.
//! - [`admit`]: connection slots before a certificate is shown.
//! - [`client`]: one query to many sensors, answers merged by time.
//! - [`tls`]: the first-setup keys (stenographer's layout) and the rustls
//!   configurations.
//!
//! The `ringcap serve`, `ringcap serve-keys` and `ringcap query --sensor`
//! commands are thin wrappers over this crate.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admit;
pub mod client;
pub mod job;
pub mod server;
pub mod steno;
pub mod stream;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

/// Runs the service on `listen` until the process ends; `ready` hears the
/// address bound (port 0 picks one) before the first connection is taken
/// (privileges are dropped there; its error ends the run). Names in
/// clients' filters are looked up in local files only, never in DNS
/// ([`ringcap_stages::names::resolve_names_locally`]): a process that cannot
/// ensure this does not serve.
pub fn run(
    listen: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    svc: server::Service,
    ready: impl FnOnce(SocketAddr) -> Result<(), String>,
) -> Result<(), String> {
    ringcap_stages::names::resolve_names_locally()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(svc.limits.queries * 2 + 2)
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("listening on {listen}: {e}"))?;
        ready(l.local_addr().map_err(|e| e.to_string())?)?;
        server::serve(l, tls, Arc::new(svc)).await;
        Ok(())
    })
}
