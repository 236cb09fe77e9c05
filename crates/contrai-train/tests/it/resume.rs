//! Exact resume: a lifecycle run SIGKILLed at random moments (in any phase, across phase
//! boundaries) and resumed writes the same metrics.jsonl and decisions.jsonl as one never
//! interrupted; so does one stopped by SIGTERM (a stop checkpoint of the step it stopped at); a
//! corrupt newest checkpoint falls back to the previous one.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::{Collect, demo_file, metrics_of, safetensors, tiny_recipe, with_all_phases};
use contrai_data::Silent;
use contrai_train::{Options, train};

const STEPS: u64 = 40;
const WORKER_DIR: &str = "CONTRAI_TEST_WORKER_RUN";
const WORKER_DATA: &str = "CONTRAI_TEST_WORKER_DATA";
/// Set: the worker stops on SIGTERM as `contrai train` does, and says where it stopped.
const WORKER_SIGNALS: &str = "CONTRAI_TEST_WORKER_SIGNALS";
/// `bert` or `lora`: the worker fine-tunes the tiny pretrained BERT (in full, or through LoRA
/// adapters) instead of training the transformer.
const WORKER_BERT: &str = "CONTRAI_TEST_WORKER_BERT";

/// The model a resume test trains.
#[derive(Clone, Copy, PartialEq)]
enum Net {
    Transformer,
    Bert,
    Lora,
}

/// The tiny recipe, made slow enough (tens of ms a step) for kills to land mid-run.
fn recipe(data: &Path) -> contrai_recipe::Recipe {
    let mut r = tiny_recipe(data, STEPS);
    r.model.d_model = 64;
    r.model.seq_len = 64;
    r.model.layers = 2;
    r.model.ffn = 128;
    r.main.batch = 16;
    r
}

/// [`recipe`] (or the tiny pretrained BERT's, full or LoRA) with all five phases.
fn lifecycle(data: &Path, net: Net) -> contrai_recipe::Recipe {
    let base = match net {
        Net::Transformer => recipe(data),
        Net::Bert => common::bert_recipe(data, STEPS),
        Net::Lora => {
            let mut r = common::bert_recipe(data, STEPS);
            r.model.lora = Some(contrai_recipe::recipe::Lora {
                rank: 4,
                ..Default::default()
            });
            r.main.lr = 5e-3;
            r
        }
    };
    let mut r = with_all_phases(base);
    r.contract.eval_every = 4;
    // Main runs its 40 steps and contraction is forced at its end (never skipped).
    r.contract.stable_checkpoints = 1000;
    r
}

fn run_to_end(
    data: &Path,
    run: &Path,
    resume: bool,
    stop: contrai_train::Stop,
    net: Net,
) -> contrai_train::Outcome {
    let opts = Options {
        resume,
        stop,
        ..Options::new(lifecycle(data, net), run)
    };
    train(&opts, &Silent, &Collect::default()).unwrap()
}

/// Not a test on its own: the child process the kill tests start (and SIGKILL or SIGTERM).
#[test]
fn worker_entry() {
    let (Some(run), Some(data)) = (std::env::var_os(WORKER_DIR), std::env::var_os(WORKER_DATA)) else {
        return;
    };
    let signals = std::env::var_os(WORKER_SIGNALS).is_some();
    let stop = match signals {
        true => contrai_train::Stop::on_signals().unwrap(),
        false => contrai_train::Stop::new(),
    };
    let net = match std::env::var(WORKER_BERT).as_deref() {
        Ok("bert") => Net::Bert,
        Ok("lora") => Net::Lora,
        _ => Net::Transformer,
    };
    let out = run_to_end(Path::new(&data), Path::new(&run), true, stop, net);
    if let Some(s) = out.stopped {
        let note = format!("{} {}", out.step, s.checkpoint.display());
        std::fs::write(Path::new(&run).join("stopped-at.txt"), note).unwrap();
    }
}

fn train_rows(run: &Path) -> u64 {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .map(|s| {
            s.lines()
                .filter(|l| l.contains("train_loss") && l.ends_with('}'))
                .count() as u64
        })
        .unwrap_or(0)
}

fn spawn_worker(run: &Path, data: &Path, signals: bool, net: Net) -> std::process::Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "resume::worker_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(WORKER_DIR, run)
    .env(WORKER_DATA, data)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    if signals {
        cmd.env(WORKER_SIGNALS, "1");
    }
    match net {
        Net::Bert => cmd.env(WORKER_BERT, "bert"),
        Net::Lora => cmd.env(WORKER_BERT, "lora"),
        Net::Transformer => &mut cmd,
    };
    cmd.spawn().unwrap()
}

/// A reference run of every phase in `tmp/reference`: its metrics and its train rows.
fn reference(tmp: &Path, data: &Path, net: Net) -> (PathBuf, Vec<String>, u64) {
    let reference: PathBuf = tmp.join("reference");
    let out = run_to_end(data, &reference, false, contrai_train::Stop::new(), net);
    assert!(out.finished);
    let expected = metrics_of(&reference);
    let phases: Vec<&str> = ["main", "contract", "refine"]
        .into_iter()
        .filter(|p| expected.iter().any(|r| r.contains(&format!("\"phase\":\"{p}\""))))
        .collect();
    assert_eq!(
        phases,
        ["main", "contract", "refine"],
        "the reference runs every phase"
    );
    let total = train_rows(&reference);
    (reference, expected, total)
}

/// Random targets (in train rows) for three interruptions, from the clock.
fn targets() -> impl FnMut(u64, u64) -> u64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let mut x = u64::from(nanos) | 1;
    move |done, total| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (done + 2 + x % 20).min(total - 2)
    }
}

/// Starts a worker and interrupts it (`interrupt`) once `run` has `target` train rows.
fn interrupt_at(run: &Path, data: &Path, target: u64, signals: bool, net: Net) {
    let mut child = spawn_worker(run, data, signals, net);
    let t0 = Instant::now();
    while train_rows(run) < target && t0.elapsed() < Duration::from_secs(120) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if signals {
        // Its handlers are in place once it holds the run's lock.
        let me = format!("pid {}\n", child.id());
        while !std::fs::read_to_string(run.join(".contrai.lock")).is_ok_and(|l| l.starts_with(&me))
            && child.try_wait().unwrap().is_none()
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let status = child.wait().unwrap();
        assert!(status.success(), "a stopped worker exits normally ({status})");
    } else {
        child.kill().ok(); // SIGKILL
        child.wait().unwrap();
    }
}

/// The interrupted run, resumed to its end, equals the reference: metrics, decisions, weights.
fn assert_resumed_equal(
    run: &Path,
    data: &Path,
    reference: &Path,
    expected: &[String],
    stops: &[u64],
    net: Net,
) {
    let status = spawn_worker(run, data, false, net).wait().unwrap();
    assert!(
        status.success(),
        "the resumed worker failed (stops after steps {stops:?})"
    );
    let got = metrics_of(run);
    assert_eq!(got.len(), expected.len(), "stops after steps {stops:?}");
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        assert_eq!(g, e, "row {i} differs (stops after steps {stops:?})");
    }
    let decisions = |r: &Path| std::fs::read_to_string(r.join("decisions.jsonl")).unwrap();
    assert_eq!(
        decisions(run),
        decisions(reference),
        "stops after steps {stops:?}"
    );
    let a = safetensors(&reference.join("final/model.safetensors"));
    assert!(
        a == safetensors(&run.join("final/model.safetensors")),
        "final weights differ (stops after steps {stops:?})"
    );
}

#[test]
fn sigkill_at_random_steps_then_resume_matches_an_uninterrupted_run() {
    killed_and_resumed(Net::Transformer);
}

#[test]
fn a_pretrained_fine_tune_killed_at_random_steps_resumes_exactly() {
    killed_and_resumed(Net::Bert);
}

#[test]
fn a_lora_fine_tune_killed_at_random_steps_resumes_exactly_across_the_merge() {
    killed_and_resumed(Net::Lora);
}

/// Three SIGKILLs at random steps of a lifecycle run, then a resume to its end: equal to the
/// run never killed. A LoRA run's last kill lands after main (its adapters merged).
fn killed_and_resumed(net: Net) {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let (reference, expected, total) = reference(tmp.path(), &data, net);
    let run = tmp.path().join("killed");
    let mut next = targets();
    let mut kills = Vec::new();
    for i in 0..3 {
        let mut target = next(train_rows(&run), total);
        if net == Net::Lora && i == 2 {
            target = target.max(STEPS + 2).min(total - 2);
        }
        interrupt_at(&run, &data, target, false, net);
        kills.push(train_rows(&run));
    }
    assert!(
        kills.windows(2).all(|w| w[0] <= w[1]) && kills[0] < total,
        "kills after steps {kills:?}"
    );
    assert_resumed_equal(&run, &data, &reference, &expected, &kills, net);
    eprintln!("killed after steps {kills:?}; resumed run identical");
}

#[test]
fn sigterm_at_random_steps_checkpoints_where_it_stops_and_resumes_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let (reference, expected, total) = reference(tmp.path(), &data, Net::Transformer);
    let run = tmp.path().join("stopped");
    let note = run.join("stopped-at.txt");
    let mut next = targets();
    let mut stops = Vec::new();
    for _ in 0..3 {
        let _ = std::fs::remove_file(&note);
        interrupt_at(&run, &data, next(train_rows(&run), total), true, Net::Transformer);
        let Ok(text) = std::fs::read_to_string(&note) else {
            continue; // the signal came after the last step: the run finished
        };
        let (step, dir) = text.split_once(' ').unwrap();
        let step: u64 = step.parse().unwrap();
        // Nothing trained is lost: the checkpoint holds the last step logged.
        let last = std::fs::read_to_string(run.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .rev()
            .find(|l| l.contains("train_loss"))
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["step"]
                    .as_u64()
                    .unwrap()
            });
        assert_eq!(last, Some(step), "{text}");
        assert!(dir.ends_with(&format!("{step:08}")), "{text}");
        contrai_train::checkpoint::load(Path::new(dir)).unwrap();
        stops.push(step);
    }
    assert!(!stops.is_empty(), "no SIGTERM landed mid-run");
    assert_resumed_equal(&run, &data, &reference, &expected, &stops, Net::Transformer);
    eprintln!("stopped after steps {stops:?}; resumed run identical");
}

#[test]
fn a_corrupt_newest_checkpoint_falls_back_to_the_previous_one() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    let mut opts = Options::new(recipe(&data), &run);
    opts.stop_after = Some(12);
    let out = train(&opts, &Silent, &Collect::default()).unwrap();
    assert_eq!(out.step, 12);
    assert!(!out.finished);
    let newest = run.join("checkpoints/step-00000010/model.bpk");
    let mut bytes = std::fs::read(&newest).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xFF;
    std::fs::write(&newest, bytes).unwrap();

    let log = Collect::default();
    opts.stop_after = None;
    opts.resume = true;
    let out = train(&opts, &Silent, &log).unwrap();
    assert_eq!(out.resumed_from, Some(5));
    let warnings = log.warnings.lock().unwrap().clone();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("step-00000010") && w.contains("SHA-256")),
        "{warnings:?}"
    );
    assert!(out.finished);

    let reference = tmp.path().join("reference");
    train(
        &Options::new(recipe(&data), &reference),
        &Silent,
        &Collect::default(),
    )
    .unwrap();
    assert_eq!(metrics_of(&run), metrics_of(&reference));
}

#[test]
fn checkpoints_keep_the_last_k_and_the_best() {
    let tmp = tempfile::tempdir().unwrap();
    let data = demo_file(tmp.path(), 300);
    let run = tmp.path().join("run");
    train(&Options::new(recipe(&data), &run), &Silent, &Collect::default()).unwrap();
    let kept: Vec<u64> = contrai_train::checkpoint::list(&run.join("checkpoints"))
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert!(kept.len() <= 3, "{kept:?}");
    assert!(kept.ends_with(&[35, 40]), "{kept:?}");
    for (_, dir) in contrai_train::checkpoint::list(&run.join("checkpoints")) {
        contrai_train::checkpoint::load(&dir).unwrap();
    }
}
