//! Key bundles on disk: dealt to files, streamed back into a secure run that equals the
//! plaintext reference; damaged, foreign and used bundles are errors, never wrong answers.

use std::path::{Path, PathBuf};
use std::sync::mpsc;

use engine::{Graph, Impl, KeySource, build, deal_into, plain, reconstruct, run_party, share_input};
use fss::Party;
use fss::rng::{DealerRng, SeedableRng};
use gates::GateError;
use models::ModelName;
use service::bundle::{BundleError, BundleHeader, BundleId, BundleReader, BundleWriter, fingerprint};
use service::store::{self, Store};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fusefss-bundle-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("p0")).unwrap();
    std::fs::create_dir_all(d.join("p1")).unwrap();
    d
}

/// One layer of bert-tiny over `seq` tokens, and an input.
fn program_of(seq: usize) -> (Graph, Vec<u64>) {
    let m = models::registry::load(ModelName::BertTiny, Some(1)).unwrap();
    let ids = m.tokens(Some("keys on disk"), Some(seq)).unwrap();
    (m.graph(seq).unwrap(), m.input(&ids))
}

fn program(_: &mut DealerRng) -> (Graph, Vec<u64>) {
    program_of(4)
}

fn open(p: &Path, g: &Graph, imp: Impl, party: Party) -> Result<BundleReader, BundleError> {
    BundleReader::open(p, g, &fingerprint(g, imp), party)
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
    // (the dealer marks the folders; these tests leave that to the store)
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
    run_with(g, &build(g, imp).unwrap(), keys, x, r)
}

/// [`run`] with the program's gates given.
fn run_with(
    g: &Graph,
    gates: &[Option<Box<dyn engine::DynGate>>],
    keys: [&mut (dyn KeySource + Send); 2],
    x: &[u64],
    r: &mut DealerRng,
) -> [Result<Vec<u64>, GateError>; 2] {
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
        let gates = std::sync::Arc::new(build(&g, imp).unwrap());
        let want = plain(&g, &gates, &x);
        // One party reads as it goes, the other ahead on a thread, or decoding the keys
        // there too: the same keys.
        for decode in [false, true] {
            let mut k0 = open(&p0, &g, imp, Party::P0).unwrap();
            let mut k1 = open(&p1, &g, imp, Party::P1).unwrap();
            if decode {
                k1.decode_ahead(gates.clone());
            } else {
                k1.read_ahead();
            }
            assert_eq!(k0.header().descriptor, "test layer");
            let [y0, y1] = run_with(&g, &gates, [&mut k0, &mut k1], &x, &mut r);
            assert_eq!(reconstruct(&y0.unwrap(), &y1.unwrap(), g.n), want, "{imp:?}, decode ahead {decode}");
        }
        // Keys decoded ahead are asked for with other gates (a program built again): an
        // error, not a key of another gate.
        let mut k0 = open(&p0, &g, imp, Party::P0).unwrap();
        let mut k1 = open(&p1, &g, imp, Party::P1).unwrap();
        k1.decode_ahead(gates.clone());
        let [_, y1] = run(&g, imp, [&mut k0, &mut k1], &x, &mut r);
        assert!(y1.unwrap_err().to_string().contains("decoded ahead with another gate"));
        // The mask sections still come as masks from a decoding reader, and one dropped
        // part way (its thread then stops at its next send) is no error.
        let mut k1 = open(&p1, &g, imp, Party::P1).unwrap();
        k1.decode_ahead(gates.clone());
        assert_eq!(k1.input_mask().unwrap().len(), g.input.len());
        drop(k1);
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
    assert!(err(open(&p0, &g, Impl::Fusefss, Party::P1).unwrap_err()).contains("party 0"));
    assert!(err(open(&p0, &g, Impl::Sigma, Party::P0).unwrap_err()).contains("another model"));
    let (g2, _) = program_of(5);
    assert!(matches!(open(&p0, &g2, Impl::Fusefss, Party::P0), Err(BundleError::Mismatch { .. })));

    // Bad magic, other version, damaged header.
    let bytes = std::fs::read(&p1).unwrap();
    let bad = d.join("bad.fkb");
    let mut b = bytes.clone();
    b[0] ^= 1;
    std::fs::write(&bad, &b).unwrap();
    assert!(err(open(&bad, &g, Impl::Fusefss, Party::P1).unwrap_err()).contains("bad magic"));
    let mut b = bytes.clone();
    b[8] = 9;
    std::fs::write(&bad, &b).unwrap();
    assert!(matches!(open(&bad, &g, Impl::Fusefss, Party::P1), Err(BundleError::Version { found: 9, .. })));
    let mut b = bytes.clone();
    b[40] ^= 0x10;
    std::fs::write(&bad, &b).unwrap();
    assert!(err(open(&bad, &g, Impl::Fusefss, Party::P1).unwrap_err()).contains("checksum"));
    std::fs::write(&bad, &bytes[..50]).unwrap();
    assert!(err(open(&bad, &g, Impl::Fusefss, Party::P1).unwrap_err()).contains("truncated"));

    // A flipped byte in a key section, and a truncated file: the run fails with a key error
    // on that party (and the other sees its peer go), never a wrong answer.
    let gates = std::sync::Arc::new(build(&g, Impl::Fusefss).unwrap());
    for (damage, ahead) in [0usize, 1].into_iter().flat_map(|d| [(d, 0), (d, 1), (d, 2)]) {
        let mut b = bytes.clone();
        if damage == 0 {
            let at = b.len() / 2;
            b[at] ^= 0x40;
        } else {
            b.truncate(b.len() - 100);
        }
        std::fs::write(&bad, &b).unwrap();
        let mut k0 = open(&p0, &g, Impl::Fusefss, Party::P0).unwrap();
        let mut k1 = open(&bad, &g, Impl::Fusefss, Party::P1).unwrap();
        match ahead {
            1 => k1.read_ahead(),
            2 => k1.decode_ahead(gates.clone()),
            _ => {}
        }
        let [y0, y1] = run_with(&g, &gates, [&mut k0, &mut k1], &x, &mut r);
        let e1 = y1.unwrap_err();
        assert!(matches!(e1, GateError::Keys(_)), "{e1}");
        assert!(e1.to_string().contains(if damage == 0 { "checksum" } else { "truncated" }), "{e1}");
        // Party 0 may finish (damage late in party 1's file): its share alone is random.
        drop(y0);
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
    let mut s = Store::open(&dir, Party::P0).unwrap();
    let scan = s.scan().unwrap();
    assert_eq!(scan.ready.iter().map(|(_, h)| h.id).collect::<Vec<_>>(), [id(0), id(1)]);
    assert_eq!(scan.bad.len(), 1);
    let backup = std::fs::read(s.path_of(&id(0))).unwrap();
    s.consume(id(0)).unwrap();
    assert!(matches!(s.consume(id(0)), Err(BundleError::AlreadyUsed(_))));
    s.discard(&id(0)).unwrap();
    s.discard(&id(0)).unwrap();
    drop(s);

    // A restart (a fresh Store) still knows; a restored file is refused and deleted.
    std::fs::write(dir.join(id(0).file_name()), &backup).unwrap();
    let mut s = Store::open(&dir, Party::P0).unwrap();
    assert!(s.is_consumed(&id(0)));
    let scan = s.scan().unwrap();
    assert_eq!(scan.spent, [id(0)]);
    assert_eq!(scan.ready.len(), 1);
    assert!(!s.path_of(&id(0)).exists());
    assert!(matches!(s.consume(id(0)), Err(BundleError::AlreadyUsed(_))));
    s.consume(id(1)).unwrap();
    drop(s);
    assert!(Store::open(&dir, Party::P0).unwrap().scan().unwrap().ready.is_empty());
    assert_eq!(store::ledger(&dir).unwrap(), [id(0).to_string(), id(1).to_string()]);
    assert!(Store::open(&d.join("missing"), Party::P0).is_err());
    assert_eq!(id(3).to_string().parse::<BundleId>().unwrap(), id(3));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_store_is_served_by_one_process_for_one_party() {
    let d = tmp("lock");
    let mut r = DealerRng::seed_from_u64(5);
    let (g, _) = program(&mut r);
    write(&d, &g, Impl::Fusefss, id(0), &mut r);
    let (p0, p1) = (d.join("p0"), d.join("p1"));
    // The lock: a second store on the folder is refused while the first lives.
    let s = Store::open(&p0, Party::P0).unwrap();
    let e = Store::open(&p0, Party::P0).unwrap_err();
    assert!(matches!(e, BundleError::Locked { .. }), "{e}");
    assert!(e.to_string().contains(&std::process::id().to_string()), "{e}");
    drop(s);
    let s = Store::open(&p0, Party::P0).unwrap();
    drop(s);
    // The party: read from the bundles of an unmarked folder, then from its marker.
    let e = Store::open(&p1, Party::P0).unwrap_err();
    assert!(matches!(e, BundleError::WrongParty { found: 1, wanted: 0, .. }), "{e}");
    drop(Store::open(&p1, Party::P1).unwrap());
    assert!(matches!(Store::open(&p1, Party::P0), Err(BundleError::WrongParty { .. })));
    store::prepare(&p1, Party::P1).unwrap();
    assert!(matches!(store::prepare(&p1, Party::P0), Err(BundleError::WrongParty { .. })));
    // Another party's bundle in a folder is skipped and left in place, never consumed.
    let stray = p0.join("stray.fkb");
    std::fs::copy(p1.join(id(0).file_name()), &stray).unwrap();
    let s = Store::open(&p0, Party::P0).unwrap();
    let scan = s.scan().unwrap();
    assert_eq!(scan.ready.len(), 1);
    assert!(scan.bad.iter().any(|(p, why)| p == &stray && why.contains("party 1")));
    assert!(stray.exists() && s.consumed_count() == 0);
    drop(s);
    // A store whose ledger cannot be appended (here a folder in its place: permissions do
    // not stop root) is refused at start-up, not run with bundles it cannot retire.
    let ro = d.join("ro");
    std::fs::create_dir_all(ro.join("consumed.log")).unwrap();
    let e = Store::open(&ro, Party::P0).unwrap_err();
    assert!(e.to_string().contains("must be writable"), "{e}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p0), 0o700);
        assert_eq!(mode(&p0.join(id(0).file_name())), 0o600);
        assert_eq!(mode(&p0.join("consumed.log")), 0o600);
    }
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_session_bundle_runs_step_by_step() {
    use service::session::{self, SessionShape};
    let d = tmp("session");
    let mut r = DealerRng::seed_from_u64(6);
    let loaded = models::registry::load(ModelName::LlamaTiny, None).unwrap();
    let m = loaded.llama().unwrap();
    let shape = SessionShape { prompt_len: 3, new_tokens: 3 };
    let tokens = [[5u32, 77, 300].as_slice(), &[12], &[499]];
    for imp in [Impl::Fusefss, Impl::Sigma] {
        let (fp, sections) = session::identity(&m.fx, imp, shape, &mut Default::default()).unwrap();
        let header = |party| BundleHeader {
            party,
            id: id(imp as u32 + 10),
            fingerprint: fp,
            descriptor: "a session".into(),
            sections: sections as u32,
        };
        let mut w0 = BundleWriter::create_in(&d.join("p0"), 50, &header(Party::P0)).unwrap();
        let mut w1 = BundleWriter::create_in(&d.join("p1"), 50, &header(Party::P1)).unwrap();
        let reports = session::deal(&m.fx, imp, shape, &mut r, [&mut w0, &mut w1], |_, _| {}).unwrap();
        assert_eq!(reports.len(), 3);
        let (p0, p1) = (w0.finish().unwrap(), w1.finish().unwrap());
        let mut k0 = BundleReader::open_sections(&p0, 50, sections, &fp, Party::P0).unwrap();
        let mut k1 = BundleReader::open_sections(&p1, 50, sections, &fp, Party::P1).unwrap();
        k0.read_ahead();
        // A session's bundle is not a single program's.
        let (g0, _) = session::step_program(&m.fx, imp, shape, 0).unwrap();
        assert!(BundleReader::open(&p1, &g0, &fp, Party::P1).is_err());
        let (mut held, mut plain_cache): ([Vec<Vec<u64>>; 2], Vec<Vec<u64>>) = ([vec![], vec![]], vec![]);
        for (t, ids) in tokens.iter().enumerate() {
            let (g, gates) = session::step_program(&m.fx, imp, shape, t).unwrap();
            let x = m.fx.input(ids);
            let (want, next) = engine::plain_step(&g, &gates, &x, &plain_cache).unwrap();
            let (x0, x1) = share_input(&x, g.n, &mut r);
            let [y0, y1] =
                engine::run_threads_step(&g, &gates, [&mut k0, &mut k1], [x0, x1], [&held[0], &held[1]])
                    .unwrap();
            assert_eq!(reconstruct(&y0.output, &y1.output, g.n), want, "{imp:?} step {t}");
            held = [y0.carried, y1.carried];
            plain_cache = next;
        }
        // Every section was read, and the end checked: nothing is left to use.
        assert!(k0.input_mask().is_err() && k1.input_mask().is_err());
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// Encoded keys of both parties, as a dealer's sinks receive them.
#[derive(Default)]
struct Collected {
    sections: Vec<Vec<u8>>,
}

impl engine::KeySink for Collected {
    fn input_mask(&mut self, share: Vec<u64>) -> Result<(), engine::EngineError> {
        self.sections.push(share.iter().flat_map(|w| w.to_le_bytes()).collect());
        Ok(())
    }
    fn gate_key(
        &mut self,
        _: usize,
        _: &dyn engine::DynGate,
        _: Box<dyn std::any::Any + Send>,
    ) -> Result<(), engine::EngineError> {
        unreachable!("this sink takes bytes")
    }
    fn output_mask(&mut self, share: Vec<u64>) -> Result<(), engine::EngineError> {
        self.sections.push(share.iter().flat_map(|w| w.to_le_bytes()).collect());
        Ok(())
    }
    fn wants_bytes(&self) -> bool {
        true
    }
    fn gate_bytes(&mut self, _: usize, bytes: Vec<u8>) -> Result<(), engine::EngineError> {
        self.sections.push(bytes);
        Ok(())
    }
}

/// The dealer gives a seeded gate's values the split `(0, v)` (`Split::Resplit`): safe
/// only because the seeded encoding stores every share word as the value minus a pad, so
/// that the dealt split reaches no key. Proof for every kind of gate of these programs:
/// the bundles are byte for byte the same with a random split and with `(0, v)` on the same
/// generator stream (`Split::ResplitDrawing`); and `Resplit` itself deals exact keys (the
/// other tests here deal with it).
#[test]
fn seeded_keys_do_not_depend_on_the_dealt_split() {
    let programs = [
        (ModelName::BertTiny, 6usize),
        (ModelName::LlamaTiny, 5), // RMSNorm, SiLU, products, rotary, causal softmax
        (ModelName::Gpt2, 3),      // GeLU's tanh form
    ];
    for (model, seq) in programs {
        let m = models::registry::load(model, Some(1)).unwrap();
        let g = m.graph(seq).unwrap();
        let gates = build(&g, Impl::Fusefss).unwrap();
        let deal = |mode: engine::Split| {
            let mut r = DealerRng::seed_from_u64(21);
            let (mut a, mut b) = (Collected::default(), Collected::default());
            engine::deal_into_split(&g, &gates, &mut r, [&mut a, &mut b], mode).unwrap();
            [a.sections, b.sections]
        };
        let random = deal(engine::Split::Random);
        let zero = deal(engine::Split::ResplitDrawing);
        assert!(random[0].len() > 2, "{model:?}: no gates");
        for p in 0..2 {
            for (s, (x, y)) in random[p].iter().zip(&zero[p]).enumerate() {
                assert!(x == y, "{model:?}: party {p}'s section {s} depends on the dealt split");
            }
        }
    }
    // A dealer whose own generator does not split at random is refused (its masks' shares
    // are stored as dealt).
    let (g, _) = program_of(4);
    let gates = build(&g, Impl::Fusefss).unwrap();
    let mut r = DealerRng::seed_from_u64(3).with_split(engine::Split::Resplit);
    let (mut a, mut b) = (Collected::default(), Collected::default());
    let e = engine::deal_into(&g, &gates, &mut r, [&mut a, &mut b], |_, _| {}).unwrap_err();
    assert!(e.to_string().contains("split values at random"), "{e}");
}
