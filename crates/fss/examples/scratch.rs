//! scratch profiling driver (not committed)
use fss::AddShare;
use fss::bitdpf::{self, BitDpfParams, CmpShares};
use fss::dcf::{self, DcfParams};
use fss::rng::{DealerRng, Rng, SeedableRng};
fn main() {
    let what = std::env::args().nth(1).unwrap_or_default();
    let mut r = DealerRng::seed_from_u64(1);
    let m = 8192;
    let a: Vec<u64> = (0..m).map(|_| r.next_u64() >> 14).collect();
    let xs: Vec<u64> = (0..m).map(|_| r.next_u64() >> 14).collect();
    let reps = 200;
    let t = std::time::Instant::now();
    match what.as_str() {
        "lt" => {
            let (k0, _) = bitdpf::keygen(BitDpfParams::new(50).unwrap(), &a, &mut r).unwrap();
            let mut out = vec![CmpShares::default(); m];
            for _ in 0..reps {
                k0.eval(&xs, &mut out).unwrap()
            }
        }
        "dcf4" => {
            let b: Vec<u64> = (0..4 * m).map(|_| r.next_u64()).collect();
            let (k0, _) = dcf::keygen(DcfParams::new(50, 64, 4).unwrap(), &a, &b, &mut r).unwrap();
            let mut out = vec![AddShare::default(); 4 * m];
            for _ in 0..reps {
                k0.eval(&xs, &mut out).unwrap()
            }
        }
        "fd" => {
            let p = fss::dpf::DpfParams::new(13, 64).unwrap();
            let (k0, _) = fss::dpf::keygen(p, &vec![5; 128], &vec![1; 128], &mut r).unwrap();
            for _ in 0..50 {
                std::hint::black_box(k0.full_domain(0..128).unwrap());
            }
            println!("{:.2} ns/entry", t.elapsed().as_secs_f64() * 1e9 / (50 * 128 * 8192) as f64);
            return;
        }
        "win" => {
            let m = 1024;
            let (k0, _) = bitdpf::keygen(
                BitDpfParams::new(37).unwrap(),
                &a[..m].iter().map(|v| v >> 13).collect::<Vec<_>>(),
                &mut r,
            )
            .unwrap();
            let starts: Vec<u64> = xs[..m].iter().map(|v| v >> 13).collect();
            let width: usize = std::env::var("W").ok().and_then(|v| v.parse().ok()).unwrap_or(16384);
            let mut out = vec![0u64; m * width / 64];
            for _ in 0..reps {
                k0.eval_window_bits(&starts, width, &mut out).unwrap();
            }
            println!(
                "win: {:.2} ns/key ({:.3} ns/position)",
                t.elapsed().as_secs_f64() * 1e9 / (reps * m) as f64,
                t.elapsed().as_secs_f64() * 1e9 / (reps * m * width) as f64
            );
            return;
        }
        "gen" => {
            let b: Vec<u64> = (0..m).map(|_| r.next_u64()).collect();
            for _ in 0..reps / 20 {
                dcf::keygen(DcfParams::new(50, 64, 1).unwrap(), &a, &b, &mut r).unwrap();
            }
            println!("{:.1} ns/key", t.elapsed().as_secs_f64() * 1e9 / (reps / 20 * m) as f64);
            return;
        }
        _ => {}
    }
    println!("{what}: {:.1} ns/eval", t.elapsed().as_secs_f64() * 1e9 / (reps * m) as f64);
}
