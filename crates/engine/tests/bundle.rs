//! Key bundles on disk: dealt to files, streamed back into a secure run that equals the
//! plaintext reference; damaged, foreign and used bundles are errors, never wrong answers.

mod common;

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use common::layer_graph;
use engine::blocks::quantize;
use engine::bundle::{BundleError, BundleHeader, BundleId, BundleReader, BundleWriter, Store, fingerprint};
use engine::{Graph, Impl, KeySource, build, deal_into, plain, reconstruct, run_party, share_input};
use fss::Party;
use fss::rng::{DealerRng, SeedableRng};
use gates::GateError;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fusefss-bundle-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("p0")).unwrap();
    std::fs::create_dir_all(d.join("p1")).unwrap();
    d
}

fn program(r: &mut DealerRng) -> (Graph, Vec<u64>) {
    let g = layer_graph(37, 12, 4, 8, 2, 16, false, r);
    let x = quantize(&(0..32).map(|i| (i as f64 / 7.0) - 2.0).collect::<Vec<_>>(), 12, 37);
    (g, x.to_vec())
}

/// Deal one bundle per party into `dir/p0`, `dir/p1`.
fn write(dir: &Path, g: &Graph, imp: Impl, id: BundleId, r: &mut DealerRng) -> [PathBuf; 2] {
    let gates = build(g, imp).unwrap();
    let header = |party| BundleHeader {
        party,
        id,
        fingerprint: fingerprint(g, imp),
        descriptor: "test layer".into(),
        sections: 2 + g.gates() as u32,
    };
    let mut w0 = BundleWriter::create(&dir.join("p0"), g, &header(Party::P0)).unwrap();
    let mut w1 = BundleWriter::create(&dir.join("p1"), g, &header(Party::P1)).unwrap();
    deal_into(g, &gates, r, [&mut w0, &mut w1], |_, _| {}).unwrap();
    [w0.finish().unwrap(), w1.finish().unwrap()]
}

/// Run both parties from key sources; each party's result.
fn run(
    g: &Graph,
    imp: Impl,
    keys: [&mut (dyn KeySource + Send); 2],
    x: &[u64],
    r: &mut DealerRng,
) -> [Result<Vec<u64>, GateError>; 2] {
    let gates = build(g, imp).unwrap();
    let (x0, x1) = share_input(x, g.n, r);
    let (tx0, rx1) = mpsc::channel::<Vec<u8>>();
    let (tx1, rx0) = mpsc::channel::<Vec<u8>>();
    let link = |tx: mpsc::Sender<Vec<u8>>, rx: mpsc::Receiver<Vec<u8>>| {
        move |m, idle: &mut dyn FnMut()| {
            tx.send(m).map_err(|_| GateError::Desync("peer gone"))?;
            idle();
            rx.recv().map_err(|_| GateError::Desync("peer gone"))
        }
    };
    let [k0, k1] = keys;
    std::thread::scope(|s| {
        let gates = &gates;
        let h0 = s.spawn(move || run_party(g, gates, k0, &x0, link(tx0, rx0)).map(|p| p.output));
        let h1 = s.spawn(move || run_party(g, gates, k1, &x1, link(tx1, rx1)).map(|p| p.output));
        [h0.join().unwrap(), h1.join().unwrap()]
    })
}

fn id(index: u32) -> BundleId {
    BundleId { run: [7; 16], index }
}

#[test]
fn a_bundle_from_disk_gives_the_exact_result() {
    let d = tmp("exact");
    let mut r = DealerRng::seed_from_u64(1);
    let (g, x) = program(&mut r);
    for (i, imp) in [Impl::Fusefss, Impl::Sigma].into_iter().enumerate() {
        let [p0, p1] = write(&d, &g, imp, id(i as u32), &mut r);
        let mut k0 = BundleReader::open(&p0, &g, imp, Party::P0).unwrap();
        let mut k1 = BundleReader::open(&p1, &g, imp, Party::P1).unwrap();
        assert_eq!(k0.header().descriptor, "test layer");
        let [y0, y1] = run(&g, imp, [&mut k0, &mut k1], &x, &mut r);
        let want = plain(&g, &build(&g, imp).unwrap(), &x);
        assert_eq!(reconstruct(&y0.unwrap(), &y1.unwrap(), g.n), want, "{imp:?}");
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn damaged_and_foreign_bundles_are_refused() {
    let d = tmp("damaged");
    let mut r = DealerRng::seed_from_u64(2);
    let (g, x) = program(&mut r);
    let [p0, p1] = write(&d, &g, Impl::Fusefss, id(0), &mut r);
    let err = |e: BundleError| e.to_string();

    // Another party's keys, another implementation, another shape.
    assert!(err(BundleReader::open(&p0, &g, Impl::Fusefss, Party::P1).unwrap_err()).contains("party 0"));
    assert!(err(BundleReader::open(&p0, &g, Impl::Sigma, Party::P0).unwrap_err()).contains("another model"));
    let (g2, _) = {
        let mut r2 = DealerRng::seed_from_u64(3);
        program(&mut r2)
    };
    assert!(matches!(
        BundleReader::open(&p0, &g2, Impl::Fusefss, Party::P0),
        Err(BundleError::Mismatch { .. })
    ));

    // Bad magic, other version, damaged header.
    let bytes = std::fs::read(&p1).unwrap();
    let bad = d.join("bad.fkb");
    let mut b = bytes.clone();
    b[0] ^= 1;
    std::fs::write(&bad, &b).unwrap();
    assert!(err(BundleReader::open(&bad, &g, Impl::Fusefss, Party::P1).unwrap_err()).contains("bad magic"));
    let mut b = bytes.clone();
    b[8] = 9;
    std::fs::write(&bad, &b).unwrap();
    assert!(matches!(
        BundleReader::open(&bad, &g, Impl::Fusefss, Party::P1),
        Err(BundleError::Version { found: 9, .. })
    ));
    let mut b = bytes.clone();
    b[40] ^= 0x10;
    std::fs::write(&bad, &b).unwrap();
    assert!(err(BundleReader::open(&bad, &g, Impl::Fusefss, Party::P1).unwrap_err()).contains("checksum"));
    std::fs::write(&bad, &bytes[..50]).unwrap();
    assert!(err(BundleReader::open(&bad, &g, Impl::Fusefss, Party::P1).unwrap_err()).contains("truncated"));

    // A flipped byte in a key section, and a truncated file: the run fails with a key error
    // on that party (and the other sees its peer go), never a wrong answer.
    for damage in [0usize, 1] {
        let mut b = bytes.clone();
        if damage == 0 {
            let at = b.len() / 2;
            b[at] ^= 0x40;
        } else {
            b.truncate(b.len() - 100);
        }
        std::fs::write(&bad, &b).unwrap();
        let mut k0 = BundleReader::open(&p0, &g, Impl::Fusefss, Party::P0).unwrap();
        let mut k1 = BundleReader::open(&bad, &g, Impl::Fusefss, Party::P1).unwrap();
        let [y0, y1] = run(&g, Impl::Fusefss, [&mut k0, &mut k1], &x, &mut r);
        let e1 = y1.unwrap_err();
        assert!(matches!(e1, GateError::Keys(_)), "{e1}");
        assert!(e1.to_string().contains(if damage == 0 { "checksum" } else { "truncated" }), "{e1}");
        assert!(y0.is_err());
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_store_refuses_used_bundles_across_restarts() {
    let d = tmp("store");
    let mut r = DealerRng::seed_from_u64(4);
    let (g, _) = program(&mut r);
    write(&d, &g, Impl::Fusefss, id(1), &mut r);
    write(&d, &g, Impl::Fusefss, id(0), &mut r);
    let dir = d.join("p0");
    std::fs::write(dir.join("junk.fkb"), b"not a bundle").unwrap();
    let mut s = Store::open(&dir).unwrap();
    let scan = s.scan().unwrap();
    assert_eq!(scan.ready.iter().map(|(_, h)| h.id).collect::<Vec<_>>(), [id(0), id(1)]);
    assert_eq!(scan.bad.len(), 1);
    let backup = std::fs::read(s.path_of(&id(0))).unwrap();
    s.consume(id(0)).unwrap();
    assert!(matches!(s.consume(id(0)), Err(BundleError::AlreadyUsed(_))));
    s.discard(&id(0));

    // A restart (a fresh Store) still knows; a restored file is refused and deleted.
    std::fs::write(s.path_of(&id(0)), &backup).unwrap();
    let mut s = Store::open(&dir).unwrap();
    assert!(s.is_consumed(&id(0)));
    let scan = s.scan().unwrap();
    assert_eq!(scan.spent, [id(0)]);
    assert_eq!(scan.ready.len(), 1);
    assert!(!s.path_of(&id(0)).exists());
    assert!(matches!(s.consume(id(0)), Err(BundleError::AlreadyUsed(_))));
    s.consume(id(1)).unwrap();
    assert!(Store::open(&dir).unwrap().scan().unwrap().ready.is_empty());
    assert!(Store::open(&d.join("missing")).is_err());
    assert_eq!(id(3).to_string().parse::<BundleId>().unwrap(), id(3));
    let _ = std::fs::remove_dir_all(&d);
}
