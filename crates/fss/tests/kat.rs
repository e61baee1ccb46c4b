//! Known answers of docs/design/fss-building-blocks.md §2.2 (`fss-kat.txt`, produced by
//! `docs/design/models/fss_reference_model.py`): the PRG, and DPF and DCF keys and outputs for fixed roots,
//! reproduced bit for bit.

use fss::codec::{BitReader, BitWriter};
use fss::prg::{HashKey, Prg};
use fss::{dcf, dpf};

const KAT: &str = include_str!("data/fss-kat.txt");

fn hex(s: &str) -> u128 {
    u128::from_str_radix(s.trim_start_matches("0x").trim_end_matches(':'), 16).unwrap()
}

/// The value after `name=` on the line.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    let start = line.find(&format!("{name}=")).unwrap() + name.len() + 1;
    line[start..].split_whitespace().next().unwrap()
}

struct Section {
    cws: Vec<Vec<u128>>,
    final_cw: u64,
    evals: Vec<(u64, u64, u64, u64)>,
}

fn section(header: &str) -> Section {
    let mut lines = KAT.lines().skip_while(|l| !l.starts_with(header)).skip(1);
    let mut sec = Section { cws: vec![], final_cw: 0, evals: vec![] };
    for line in lines.by_ref() {
        let l = line.trim();
        if l.starts_with("final_cw=") {
            sec.final_cw = hex(field(l, "final_cw")) as u64;
        } else if l.starts_with("x=") {
            let x = hex(field(l, "x")) as u64;
            let (y0, y1, sum) = (field(l, "y0"), field(l, "y1"), field(l, "sum"));
            sec.evals.push((x, hex(y0) as u64, hex(y1) as u64, hex(sum) as u64));
        } else if l.starts_with('[') || l.is_empty() {
            break;
        } else {
            let parts: Vec<&str> = l.split_whitespace().skip(1).collect();
            sec.cws.push(parts.iter().map(|p| hex(p)).collect());
        }
    }
    sec
}

fn header() -> (u32, u32, u64, u64, u128, u128) {
    let l = KAT.lines().find(|l| l.starts_with("n=")).unwrap();
    let (n, ell) = (field(l, "n").parse().unwrap(), field(l, "ell").parse().unwrap());
    let (alpha, beta) = (hex(field(l, "alpha")) as u64, hex(field(l, "beta")) as u64);
    let l = KAT.lines().find(|l| l.starts_with("root0=")).unwrap();
    (n, ell, alpha, beta, hex(field(l, "root0")), hex(field(l, "root1")))
}

#[test]
fn prg_known_answers() {
    let (_, _, _, _, root0, _) = header();
    let keys = [HashKey::Left, HashKey::Right, HashKey::ValueLeft, HashKey::ValueRight];
    for (j, hk) in keys.into_iter().enumerate() {
        let name = format!("H_{j}(root0)");
        let line = KAT.lines().find(|l| l.starts_with(&name)).unwrap();
        assert_eq!(Prg::global().hash(hk, root0), hex(field(line, &name)), "{name}");
    }
}

/// One key's material parsed back: per level (scw, tl, tr); the reader is left at the
/// payload words.
fn tree_material(write: impl FnOnce(&mut BitWriter), n: u32) -> (BitReader<'static>, Vec<(u128, u64, u64)>) {
    let mut w = BitWriter::new();
    write(&mut w);
    let bytes: &'static [u8] = Box::leak(w.finish().into_boxed_slice());
    let mut r = BitReader::new(bytes);
    let _root = r.get_u128().unwrap();
    // The seed CWs' low halves, level by level, then their high halves.
    let lo: Vec<u64> = (0..n).map(|_| r.get(64).unwrap()).collect();
    let scw: Vec<u128> = lo.iter().map(|&l| u128::from(l) | u128::from(r.get(64).unwrap()) << 64).collect();
    let (tl, tr) = (r.get(n).unwrap(), r.get(n).unwrap());
    let levels = scw.iter().enumerate().map(|(i, &s)| (s, (tl >> i) & 1, (tr >> i) & 1)).collect();
    (r, levels)
}

#[test]
fn dpf_known_answers() {
    let (n, ell, alpha, beta, root0, root1) = header();
    let kat = section("[DPF]");
    let params = dpf::DpfParams::new(n, ell).unwrap().with_conversion(dpf::Conversion::LowBits);
    let (k0, k1) = dpf::keygen_with_roots(params, &[alpha], &[beta], vec![root0, root1]).unwrap();
    let (mut r, levels) = tree_material(|w| k0.write_material(w), n);
    for (i, (got, want)) in levels.iter().zip(&kat.cws).enumerate() {
        assert_eq!((got.0, got.1 as u128, got.2 as u128), (want[0], want[1], want[2]), "level {i}");
    }
    assert_eq!(r.get(ell).unwrap(), kat.final_cw);
    assert_eq!(kat.evals.len(), 5);
    for &(x, y0, y1, sum) in &kat.evals {
        assert_eq!((k0.eval_one(0, x).unwrap().0, k1.eval_one(0, x).unwrap().0), (y0, y1), "x={x:#x}");
        assert_eq!(y0.wrapping_add(y1), sum);
    }
}

#[test]
fn dcf_known_answers() {
    let (n, ell, alpha, beta, root0, root1) = header();
    let kat = section("[DCF");
    let params = dcf::DcfParams::new(n, ell, 1).unwrap();
    let (k0, k1) = dcf::keygen_with_roots(params, &[alpha], &[beta], vec![root0, root1]).unwrap();
    let (mut r, levels) = tree_material(|w| k0.write_material(w), n);
    let vcw: Vec<u64> = (0..n).map(|_| r.get(ell).unwrap()).collect();
    for i in 0..n as usize {
        let got = (levels[i].0, vcw[i] as u128, levels[i].1 as u128, levels[i].2 as u128);
        let want = &kat.cws[i];
        assert_eq!(got, (want[0], want[1], want[2], want[3]), "level {i}");
    }
    assert_eq!(r.get(ell).unwrap(), kat.final_cw);
    assert_eq!(kat.evals.len(), 5);
    for &(x, y0, y1, sum) in &kat.evals {
        let (a, b) = (k0.eval_one(0, x).unwrap()[0].0, k1.eval_one(0, x).unwrap()[0].0);
        assert_eq!((a, b), (y0, y1), "x={x:#x}");
        assert_eq!(y0.wrapping_add(y1), sum);
    }
}
