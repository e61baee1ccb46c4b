//! `fusefss bench model --json`: the fields the issue names, exact on both implementations,
//! and `--reps` / `--warmup`.

mod common;

use common::{assert_fields, fusefss, json_rows};

#[test]
fn model_rows_name_every_field_and_the_median_run() {
    let rows = json_rows(&[
        "bench",
        "model",
        "--model",
        "bert-tiny",
        "--seq",
        "12",
        "--layers",
        "1",
        "--impl",
        "both",
        "--reps",
        "2",
        "--warmup",
        "0",
        "--json",
    ]);
    assert_eq!(rows.len(), 2);
    let fields = [
        "model",
        "impl",
        "seq",
        "layers",
        "n",
        "f",
        "online_ms",
        "keygen_ms",
        "key_bytes",
        "comm_bytes",
        "rounds",
        "exact",
        "max_abs_err_vs_float",
        "cosine_vs_float",
        "keys",
        "keys_on_disk_bytes",
        "key_bytes_each",
        "aes_blocks",
        "aes_ns_per_block",
        "keygen_aes_blocks",
        "peak_rss_bytes",
        "deal_cpu_ms_by_layer",
        "encode_cpu_ms_by_layer",
        "online_cpu_ms",
        "wipe_ms",
        "reader_read_ms",
        "reader_decode_ms",
        "reader_wait_ms",
    ];
    assert_fields(&rows, &fields);
    for r in &rows {
        assert_eq!(
            (r["model"].as_str(), r["seq"].as_u64(), r["layers"].as_u64()),
            (Some("bert-tiny"), Some(12), Some(1))
        );
        assert_eq!(r["exact"], true, "{r}");
        // Keys on disk by default: both parties' bundles, a little more than their keys.
        assert_eq!(r["keys"], "disk", "{r}");
        let (disk, key) = (r["keys_on_disk_bytes"].as_u64().unwrap(), r["key_bytes"].as_u64().unwrap());
        let each: Vec<u64> =
            r["key_bytes_each"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(key, each[0].max(each[1]), "{r}");
        let both = each[0] + each[1];
        assert!(disk > both && disk < both + 100_000, "{r}");
        assert!(r["peak_rss_bytes"].as_u64().unwrap() > 0, "{r}");
        // The dealer's CPU, making and encoding the keys, for every layer that has keys.
        let layers = |k: &str| -> Vec<String> { r[k].as_object().unwrap().keys().cloned().collect() };
        let keyed = layers("key_bytes_by_layer");
        for k in ["deal_cpu_ms_by_layer", "encode_cpu_ms_by_layer"] {
            assert_eq!(layers(k), keyed, "{k}: {r}");
            assert!(r[k].as_object().unwrap().values().all(|t| t.as_f64().unwrap() > 0.0), "{k}: {r}");
        }
        // Where the online time went: the process's CPU, the spent keys' wipe, and (keys
        // on disk) the bundle readers' reading and decoding.
        for k in ["online_cpu_ms", "wipe_ms", "reader_read_ms", "reader_decode_ms"] {
            assert!(r[k].as_f64().unwrap() > 0.0, "{k}: {r}");
        }
        // (The online phase may not have waited for its reader at all.)
        assert!(r["reader_wait_ms"].as_f64().unwrap() >= 0.0, "{r}");
        // Online AES work, and its time per block, both measured.
        assert!(r["aes_blocks"].as_u64().unwrap() > 10_000, "{r}");
        assert!(r["aes_ns_per_block"].as_f64().unwrap() > 0.0, "{r}");
        // The dealer's AES: its trees, randomness and pads, more than a server's online.
        assert!(r["keygen_aes_blocks"].as_u64().unwrap() > r["aes_blocks"].as_u64().unwrap(), "{r}");
        // Two timed runs; the reported time is their median (the upper one of two).
        let runs: Vec<f64> =
            r["online_ms_runs"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(runs.len(), 2, "{r}");
        assert_eq!(r["online_ms"].as_f64().unwrap(), runs.iter().cloned().fold(f64::MIN, f64::max));
    }
    // Keys in memory: no bundle readers.
    let mem = json_rows(&[
        "bench",
        "model",
        "--seq",
        "12",
        "--layers",
        "1",
        "--reps",
        "1",
        "--warmup",
        "0",
        "--keys-in-memory",
        "--json",
    ]);
    assert_eq!(mem[0]["keys"], "memory");
    for k in ["reader_read_ms", "reader_decode_ms", "reader_wait_ms"] {
        assert!(mem[0][k].is_null(), "{k}: {}", mem[0]);
    }
    assert!(mem[0]["online_cpu_ms"].as_f64().unwrap() > 0.0, "{}", mem[0]);
    let get = |imp: &str| rows.iter().find(|r| r["impl"] == imp).unwrap_or_else(|| panic!("no {imp} row"));
    let (f, s) = (get("fusefss"), get("sigma"));
    assert!(f["rounds"].as_u64() < s["rounds"].as_u64());
    assert!(f["comm_bytes"].as_u64() < s["comm_bytes"].as_u64());
    assert!(f["keygen_aes_blocks"].as_u64() < s["keygen_aes_blocks"].as_u64());
}

#[test]
fn zero_reps_is_an_error() {
    let out = fusefss(&["bench", "model", "--seq", "4", "--reps", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--reps"));
}

/// An interrupted run removes the key folder it made (Ctrl-C, `kill`): the bundles of a
/// run are gigabytes, and a signal skips the clean-up the command does when it ends. The
/// run's temporary folder is under a `TMPDIR` of the test's own.
#[test]
fn an_interrupted_run_removes_its_key_folder() {
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};
    /// The test's folder and run, removed and stopped however the test ends.
    struct Scratch(std::path::PathBuf, Option<Child>);
    impl Drop for Scratch {
        fn drop(&mut self) {
            if let Some(c) = &mut self.1 {
                let _ = c.kill();
                let _ = c.wait();
            }
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let tmp = std::env::temp_dir().join(format!("fusefss-interrupt-test-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut scratch = Scratch(tmp.clone(), None);
    for signal in ["-INT", "-TERM"] {
        let child = Command::new(env!("CARGO_BIN_EXE_fusefss"))
            .args([
                "bench",
                "model",
                "--model",
                "bert-tiny",
                "--seq",
                "64",
                "--impl",
                "both",
                "--reps",
                "1000",
            ])
            .env("TMPDIR", &tmp)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run fusefss");
        let (pid, folder) = (child.id(), tmp.join(format!("fusefss-keys-{}", child.id())));
        let child = scratch.1.insert(child);
        let t = Instant::now();
        // Bundles being written: the run is under way.
        while !folder.join("party0").exists() {
            assert!(t.elapsed() < Duration::from_secs(60), "no key folder at {}", folder.display());
            assert!(child.try_wait().unwrap().is_none(), "the run ended early");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert!(Command::new("kill").args([signal, &pid.to_string()]).status().unwrap().success());
        let status = child.wait().unwrap();
        scratch.1 = None;
        assert_eq!(status.code(), Some(fusefss::interrupt::INTERRUPTED), "{signal}");
        assert!(!folder.exists(), "{} left behind after {signal}", folder.display());
    }
}
