//! Start-up shared by the mock upstreams: a multi-threaded runtime, a listener without Nagle
//! delay, and a line announcing the bound address (the port may be 0: picked by the system).

use axum::Router;
use std::net::SocketAddr;

/// Serves `router` on `address` until the process ends; `announce` is told the bound address
/// before the first connection is accepted. `worker_threads`: default one per available core.
pub fn run(
    worker_threads: Option<usize>,
    address: SocketAddr,
    router: Router,
    announce: impl FnOnce(SocketAddr) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(threads) = worker_threads {
        builder.worker_threads(threads.max(1));
    }
    builder.build()?.block_on(async move {
        let listener = tokio::net::TcpListener::bind(address).await?;
        announce(listener.local_addr()?)?;
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, router).await
    })
}
