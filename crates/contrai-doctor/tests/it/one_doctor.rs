//! One doctor: every labelled log of `../shared/eval/doctor/` and `../shared/eval/doctor-real/`
//! (and of `CONTRAI_DOCTOR_CORPUS`, when it names a folder of cases), written again an eighth at a
//! time (cut anywhere, mid-line and mid-record) in the order a writer writes it and followed live:
//! at every cut the live report is what `contrai doctor` says of the log as it then stands, and
//! the last is what it says of the whole log — the same labels, steps, recommendations and
//! evidence.

use std::path::{Path, PathBuf};

use contrai_doctor::{DoctorConfig, Live, Report, diagnose, read_path};

/// The case folders of both labelled sets that `../shared` holds, and of `CONTRAI_DOCTOR_CORPUS`.
fn cases() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let sets = ["eval/doctor/cases", "eval/doctor-real/cases"].map(contrai_testkit::shared);
    let corpus = std::env::var_os("CONTRAI_DOCTOR_CORPUS").map(PathBuf::from);
    for dir in sets.into_iter().chain([corpus]).flatten() {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("case.json").is_file())
            .collect();
        found.sort();
        // A case in both (the corpus holds `../shared`'s logs too) is checked once.
        found.retain(|p| !out.iter().any(|o: &PathBuf| o.file_name() == p.file_name()));
        out.extend(found);
    }
    out
}

/// When a file is written: the event files of one TensorBoard folder one after another (a
/// job writes a new one when it starts again), in name order, which starts with their time;
/// every other file from the start. Files of different folders (a Keras run's `train/` and
/// `validation/`) grow side by side.
fn turn(rel: &Path, all: &[PathBuf]) -> usize {
    let events = |p: &Path| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("events.out.tfevents"))
    };
    if !events(rel) {
        return 0;
    }
    all.iter()
        .filter(|o| o.parent() == rel.parent() && events(o) && o.as_path() < rel)
        .count()
}

/// Every file under `dir`, relative to it.
fn files(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir.join(rel)).unwrap().flatten() {
        let r = rel.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            files(dir, &r, out);
        } else {
            out.push(r);
        }
    }
}

/// Each run's findings as JSON, by run name.
fn findings(reports: &[Report]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = reports
        .iter()
        .map(|r| (r.name.clone(), serde_json::to_string(&r.findings).unwrap()))
        .collect();
    v.sort();
    v
}

/// The first `eighth` eighths of a log, cut where a writer could have stopped: a text log at the
/// end of its last whole line, a TensorBoard or W&B run file at the end of its last whole record
/// (the line or record being written is no point yet live, while after the fact a last line is
/// taken whole and a last record cut short is a partial read), anything else anywhere.
fn cut(bytes: &[u8], eighth: usize) -> &[u8] {
    let at = bytes.len() * eighth / 8;
    if eighth == 8 {
        return bytes;
    }
    if std::str::from_utf8(bytes).is_ok() {
        let line_end = bytes[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        return &bytes[..line_end];
    }
    if bytes.starts_with(b":W&B") {
        return &bytes[..wandb_records_end(bytes, at)];
    }
    // TFRecord framing: 8 bytes of length, 4 of its checksum, the payload, 4 of checksum.
    let mut pos = 0usize;
    while let Some(len) = bytes.get(pos..pos + 8) {
        let n = u64::from_le_bytes(len.try_into().unwrap()) as usize;
        match pos.checked_add(16 + n) {
            Some(next) if next <= at => pos = next,
            _ => break,
        }
    }
    if pos > 0 { &bytes[..pos] } else { &bytes[..at] }
}

/// The end of the last whole record at or before `at` of a W&B run file: a 7-byte header, then
/// LevelDB's log format — 32 KiB blocks of records (a 7-byte header: checksum, length, type —
/// 1 whole, 4 the last piece of one cut across blocks), a block's tail under 7 bytes padding.
fn wandb_records_end(bytes: &[u8], at: usize) -> usize {
    const BLOCK: usize = 32 * 1024;
    let (mut pos, mut end) = (7, 7);
    loop {
        let left = BLOCK - pos % BLOCK;
        if left < 7 {
            pos += left;
            continue;
        }
        let Some(header) = bytes.get(pos..pos + 7) else {
            break;
        };
        let len = usize::from(u16::from_le_bytes([header[4], header[5]]));
        let next = pos + 7 + len;
        if header[6] == 0 || next > at {
            break;
        }
        if matches!(header[6], 1 | 4) {
            end = next;
        }
        pos = next;
    }
    end
}

#[test]
fn a_log_followed_as_it_grows_ends_with_the_findings_of_the_whole_log() {
    let cases = cases();
    if cases.is_empty() {
        return;
    }
    let cfg = DoctorConfig::default();
    let mut checked = 0;
    for case in &cases {
        let Ok(runs) = read_path(case, None) else { continue };
        let whole: Vec<Report> = runs.iter().map(|r| diagnose(r, &cfg)).collect();
        // The same files, written again: each grows by an eighth between two polls.
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join(case.file_name().unwrap());
        let mut rel = Vec::new();
        files(case, Path::new(""), &mut rel);
        let turns: Vec<usize> = rel.iter().map(|r| turn(r, &rel)).collect();
        let last = turns.iter().copied().max().unwrap_or(0);
        let mut live = Live::new(std::slice::from_ref(&copy), None, cfg.clone());
        for (now, eighth) in (0..=last).flat_map(|t| (1..=8).map(move |e| (t, e))) {
            for (r, &t) in rel.iter().zip(&turns).filter(|(_, t)| **t <= now) {
                let bytes = std::fs::read(case.join(r)).unwrap();
                let to = copy.join(r);
                std::fs::create_dir_all(to.parent().unwrap()).unwrap();
                std::fs::write(&to, cut(&bytes, if t < now { 8 } else { eighth })).unwrap();
            }
            live.poll();
            // Every run's report brought up to what was read (a poll spaces costly reports).
            live.report_all();
            if (now, eighth) != (last, 8)
                && let Ok(cut) = read_path(&copy, None)
            {
                let after: Vec<Report> = cut.iter().map(|r| diagnose(r, &cfg)).collect();
                let followed: Vec<Report> = live.runs().iter().map(|r| r.report.clone()).collect();
                assert_eq!(
                    findings(&followed),
                    findings(&after),
                    "{}: followed live, then after the fact on the log cut at {eighth}/8 of its turn {now}",
                    case.display()
                );
            }
        }
        // The logs have ended: what is left at their ends is read as after the fact.
        live.finish();
        let followed: Vec<Report> = live.runs().iter().map(|r| r.report.clone()).collect();
        assert_eq!(
            findings(&followed),
            findings(&whole),
            "{}: followed live, then after the fact",
            case.display()
        );
        checked += 1;
    }
    eprintln!("{checked} labelled logs: the same findings live and after the fact");
    assert!(checked >= 60, "{checked} cases checked");
}
