//! Criterion benchmarks of the transports: one round (send, then receive the peer's message)
//! between two threads of one process over the in-memory link.
//!
//! `cargo bench -p net`.

use std::sync::mpsc;

use criterion::{Criterion, criterion_group, criterion_main};
use net::{MemTransport, Transport};

/// Rounds of 64-byte messages with a peer thread that answers every one.
fn bench_mem_round(c: &mut Criterion) {
    let (mut a, mut b) = MemTransport::pair(None);
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        while stop_rx.try_recv().is_err() {
            if b.exchange(&[1u8; 64]).is_err() {
                break;
            }
        }
    });
    c.bench_function("mem/round_64_bytes", |bn| {
        bn.iter(|| a.exchange(&[2u8; 64]).expect("the peer answers"))
    });
    let _ = stop_tx.send(());
    // The peer is waiting for one more message: answer it, then let it go.
    let _ = a.send(&[0u8; 64]);
    drop(a);
    let _ = peer.join();
}

criterion_group!(benches, bench_mem_round);
criterion_main!(benches);
