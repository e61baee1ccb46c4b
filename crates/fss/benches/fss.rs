//! Criterion benchmarks of the FSS primitives: the rows of `fusefss bench fss` (DCF, DPF,
//! 1-bit DPF comparison, full-domain DPF and arithmetic DPF), batched, per evaluated point.
//!
//! `cargo bench -p fss` (set `RAYON_NUM_THREADS=1` for one-thread numbers).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fss::adpf::{self, AdpfParams};
use fss::bitdpf::{self, BitDpfParams, CmpShares};
use fss::dcf::{self, DcfParams};
use fss::dpf::{self, DpfParams};
use fss::ring::mask;
use fss::rng::{DealerRng, Rng, SeedableRng};
use fss::{AddShare, prg};

const BATCH: usize = 1024;

fn points(r: &mut DealerRng, count: usize, bits: u32) -> Vec<u64> {
    (0..count).map(|_| r.next_u64() & mask(bits)).collect()
}

fn bench_eval(c: &mut Criterion) {
    let mut r = DealerRng::seed_from_u64(1);
    let mut g = c.benchmark_group("eval");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (n, ell, kw) in [(50, 64, 1), (50, 64, 4)] {
        let p = DcfParams::new(n, ell, kw).unwrap();
        let betas = points(&mut r, BATCH * kw as usize, ell);
        let (k0, _) = dcf::keygen(p, &points(&mut r, BATCH, n), &betas, &mut r).unwrap();
        let xs = points(&mut r, BATCH, n);
        let mut out = vec![AddShare::default(); BATCH * kw as usize];
        g.bench_function(BenchmarkId::new("dcf", format!("n{n}_l{ell}_k{kw}")), |b| {
            b.iter(|| k0.eval(black_box(&xs), &mut out).unwrap())
        });
    }
    let p = DpfParams::new(50, 64).unwrap();
    let (k0, _) = dpf::keygen(p, &points(&mut r, BATCH, 50), &points(&mut r, BATCH, 64), &mut r).unwrap();
    let xs = points(&mut r, BATCH, 50);
    let mut out = vec![AddShare::default(); BATCH];
    g.bench_function(BenchmarkId::new("dpf", "n50_l64"), |b| {
        b.iter(|| k0.eval(black_box(&xs), &mut out).unwrap())
    });
    let p = BitDpfParams::new(50).unwrap();
    let (k0, _) = bitdpf::keygen(p, &points(&mut r, BATCH, 50), &mut r).unwrap();
    let mut out = vec![CmpShares::default(); BATCH];
    g.bench_function(BenchmarkId::new("dpf_lt", "n50"), |b| {
        b.iter(|| k0.eval(black_box(&xs), &mut out).unwrap())
    });
    // One of two candidate keys per point, picked at random (lanes read scattered keys).
    let (c0, _) =
        bitdpf::keygen(BitDpfParams::new(12).unwrap(), &points(&mut r, 2 * BATCH, 12), &mut r).unwrap();
    let pick: Vec<u32> = (0..BATCH).map(|j| (2 * j as u64 + (r.next_u64() & 1)) as u32).collect();
    let ys = points(&mut r, BATCH, 12);
    g.bench_function(BenchmarkId::new("dpf_lt_indexed", "n12"), |b| {
        b.iter(|| c0.eval_indexed(black_box(&pick), &ys, &mut out).unwrap())
    });
    g.finish();
}

fn bench_full_domain(c: &mut Criterion) {
    let mut r = DealerRng::seed_from_u64(2);
    let mut g = c.benchmark_group("full_domain");
    for n in [8u32, 13] {
        // 64 keys expanded together.
        g.throughput(Throughput::Elements(64 << n));
        let (k, _) = dpf::keygen(DpfParams::new(n, 64).unwrap(), &[3; 64], &[1; 64], &mut r).unwrap();
        g.bench_function(BenchmarkId::new("dpf_l64", n), |b| {
            b.iter(|| black_box(k.full_domain(0..64).unwrap()))
        });
        let (k, _) = bitdpf::keygen(BitDpfParams::new(n).unwrap(), &[3; 64], &mut r).unwrap();
        g.bench_function(BenchmarkId::new("dpf_l1", n), |b| {
            b.iter(|| black_box(k.full_domain(0..64).unwrap()))
        });
    }
    // The lookup-table shape: d = 14, e = 2, K = 1, ℓ = 50; 64 keys, fresh output and a
    // reused buffer.
    let n = 14;
    g.throughput(Throughput::Elements(64 << n));
    let p = AdpfParams::new(n, 50, 1, 2).unwrap();
    let (k, _) = adpf::keygen(p, &points(&mut r, 64, n), &[1; 64], &mut r).unwrap();
    g.bench_function(BenchmarkId::new("adpf_l50_e2", n), |b| {
        b.iter(|| black_box(k.full_domain(0..64).unwrap()))
    });
    let mut buf = vec![0u64; 64 << n];
    g.bench_function(BenchmarkId::new("adpf_l50_e2_into", n), |b| {
        b.iter(|| k.full_domain_into(0..64, black_box(&mut buf)).unwrap())
    });
    g.finish();
}

fn bench_keygen(c: &mut Criterion) {
    let mut r = DealerRng::seed_from_u64(3);
    let mut g = c.benchmark_group("keygen");
    const KEYS: usize = 1024;
    g.throughput(Throughput::Elements(KEYS as u64));
    let alphas = points(&mut r, KEYS, 50);
    let betas = points(&mut r, KEYS, 64);
    let p = DcfParams::new(50, 64, 1).unwrap();
    g.bench_function("dcf_n50_l64_k1", |b| b.iter(|| dcf::keygen(p, &alphas, &betas, &mut r).unwrap()));
    // The max tree's one-round ReLU (`gates::cmp::ReluDcf` at n = 37): two words per key.
    let p = DcfParams::new(25, 37, 2).unwrap();
    let pairs: Vec<u64> = betas.iter().flat_map(|&b| [b & mask(37), (b >> 20) & mask(37)]).collect();
    let short: Vec<u64> = alphas.iter().map(|&a| a & mask(25)).collect();
    g.bench_function("dcf_n25_l37_k2", |b| b.iter(|| dcf::keygen(p, &short, &pairs, &mut r).unwrap()));
    let p = BitDpfParams::new(50).unwrap();
    g.bench_function("dpf_lt_n50", |b| b.iter(|| bitdpf::keygen(p, &alphas, &mut r).unwrap()));
    // A truncation's carry (`gates::shift::ArsSlack` at f = 12): a tree of five levels.
    let p = BitDpfParams::new(12).unwrap();
    let low: Vec<u64> = alphas.iter().map(|&a| a & mask(12)).collect();
    g.bench_function("dpf_lt_n12", |b| b.iter(|| bitdpf::keygen(p, &low, &mut r).unwrap()));
    g.finish();
}

fn bench_aes(c: &mut Criterion) {
    let mut g = c.benchmark_group("aes");
    let input = vec![prg::AesBlock::default(); 1024];
    let mut out = input.clone();
    g.throughput(Throughput::Elements(1024));
    g.bench_function("fixed_key_1024_blocks", |b| {
        b.iter(|| prg::Prg::global().encrypt(prg::HashKey::Left, black_box(&input), &mut out))
    });
    g.finish();
}

/// The dealer's generator per 64-bit word: bulk words (shares of dealer words) and bulk
/// bytes (tree roots).
fn bench_rng(c: &mut Criterion) {
    use fss::rng::SplitRng;
    const WORDS: usize = 1 << 16;
    let mut r = DealerRng::seed_from_u64(5);
    let mut g = c.benchmark_group("rng");
    g.throughput(Throughput::Elements(WORDS as u64));
    let mut words = vec![0u64; WORDS];
    g.bench_function("fill_words", |b| b.iter(|| r.fill_words(black_box(&mut words))));
    let mut bytes = vec![0u8; 8 * WORDS];
    g.bench_function("fill_bytes", |b| b.iter(|| r.fill_bytes(black_box(&mut bytes))));
    g.finish();
}

/// Key decoding (`fss::codec`): the bulk reads a server runs on every key it loads, per
/// word read, at a bit offset (a key's runs rarely start on a byte).
fn bench_codec(c: &mut Criterion) {
    use fss::codec::{BitReader, BitWriter};
    use fss::pad::PadStream;
    const WORDS: usize = 1 << 16;
    let mut r = DealerRng::seed_from_u64(2);
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(WORDS as u64));
    let mut w = BitWriter::new();
    w.put(1, 3);
    points(&mut r, 2 * WORDS, 64).iter().for_each(|&v| w.put(v, 64));
    let data = w.finish();
    g.bench_function("copy_16_bytes", |b| {
        let mut out: Vec<u8> = Vec::with_capacity(data.len());
        b.iter(|| {
            out.clear();
            out.extend_from_slice(black_box(&data[..16 * WORDS]));
        })
    });
    g.bench_function("run_37_bits", |b| {
        let mut out = Vec::new();
        b.iter(|| {
            out.clear();
            let mut rd = BitReader::new(black_box(&data));
            rd.get(3).unwrap();
            rd.get_run(37, WORDS, &mut out).unwrap();
        })
    });
    g.bench_function("pad_share_run_37_bits", |b| {
        let mut out = Vec::new();
        b.iter(|| {
            out.clear();
            let pad = PadStream::new(&[7; 16]);
            let mut rd = BitReader::with_pad(black_box(&data), pad, u64::MAX, true);
            rd.get_share_run_map(37, WORDS, &mut out, |x| x).unwrap();
        })
    });
    let vals = points(&mut r, WORDS, 37);
    // (Into a reused buffer: a fresh one's page faults would be most of the time.)
    let mut buf: Vec<u8> = Vec::with_capacity(16 * WORDS + 64);
    g.bench_function("write_share_run_37_bits", |b| {
        b.iter(|| {
            buf.clear();
            let mut w = BitWriter::with_prefix(std::mem::take(&mut buf));
            w.put(1, 3);
            w.put_share_run(37, WORDS, |i| vals[i]);
            buf = w.finish();
        })
    });
    g.bench_function("write_split_share_run_37_bits", |b| {
        // As the seeded encoding writes party 1's key: the other party's words recorded,
        // then a split writer over them (half of the words stored).
        let mut rec = BitWriter::recording_shares(37 * WORDS as u64 / 2, true);
        rec.put_share_run(37, WORDS, |i| vals[i] ^ 5);
        let other = rec.into_shares();
        b.iter(|| {
            let mut w =
                BitWriter::split(other.clone(), PadStream::new(&[3; 16]), 37 * WORDS as u64 / 2, true);
            w.put_share_run(37, WORDS, |i| vals[i]);
            w.finish_split()
        })
    });
    g.bench_function("write_u64_run_unaligned", |b| {
        b.iter(|| {
            buf.clear();
            let mut w = BitWriter::with_prefix(std::mem::take(&mut buf));
            w.put(1, 3);
            w.put_u64_run(2 * WORDS, |i| vals[i / 2]);
            buf = w.finish();
        })
    });
    g.finish();
}

criterion_group!(benches, bench_eval, bench_full_domain, bench_keygen, bench_aes, bench_rng, bench_codec);
criterion_main!(benches);
