//! Every partial read said: a TensorBoard record that runs past the end of its file, a Trainer
//! state's entries whose steps are no step counts — named with the file and where, in the
//! report, with every finding a notch less sure.

use contrai_doctor::{Confidence, DoctorConfig, ReadError, diagnose, read_path};
use contrai_testkit::tfevents;

/// Events of a falling loss at steps `from..to`.
fn events(from: u64, to: u64) -> Vec<u8> {
    (from..to)
        .flat_map(|i| tfevents::scalar(i, "train/loss", 2.0 / (1.0 + i as f32), false))
        .collect()
}

#[test]
fn a_record_that_runs_past_the_end_mid_file_is_said_with_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let head = events(0, 60);
    // The 61st record claims a megabyte: the 60 records after it are never read.
    let mut bytes = head.clone();
    bytes.extend(tfevents::relength(&events(60, 61), 1 << 20));
    bytes.extend(events(61, 120));
    let file = dir.path().join("events.out.tfevents.1.host");
    std::fs::write(&file, &bytes).unwrap();
    let runs = read_path(&file, None).unwrap();
    let partial = &runs[0].hints.partial;
    assert_eq!(partial.len(), 1, "{partial:?}");
    assert_eq!(partial[0].at, format!("byte {}", head.len()));
    assert!(
        partial[0].what.contains("runs past the end of the file"),
        "{partial:?}"
    );
    let report = diagnose(&runs[0], &DoctorConfig::default());
    assert_eq!(report.partial, *partial);
    assert!(
        report.findings.iter().all(|f| f.confidence != Confidence::High),
        "{:?}",
        report.findings
    );
    // On the first record: an error that says the file is truncated, not "no metrics".
    std::fs::write(&file, tfevents::relength(&events(0, 1), 1 << 20)).unwrap();
    let err = read_path(&file, None).unwrap_err();
    assert!(matches!(err, ReadError::Corrupt { offset: 0, .. }), "{err}");
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn trainer_state_entries_whose_steps_are_no_step_counts_are_left_out_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let mut logs: Vec<String> = (1..=40)
        .map(|s| format!(r#"{{"step":{},"loss":{}}}"#, 10 * s, 2.0 / s as f64))
        .collect();
    logs.insert(5, r#"{"step":-1,"loss":9.0}"#.into());
    logs.insert(9, r#"{"step":1.5,"loss":9.0}"#.into());
    logs.push(r#"{"step":18446744073709551616,"loss":9.0}"#.into());
    let file = dir.path().join("trainer_state.json");
    std::fs::write(&file, format!(r#"{{"log_history":[{}]}}"#, logs.join(","))).unwrap();
    let runs = read_path(&file, None).unwrap();
    let partial = &runs[0].hints.partial;
    assert_eq!(partial.len(), 1, "{partial:?}");
    assert_eq!(partial[0].at, "log_history[5]");
    assert!(partial[0].what.contains("3 entries"), "{partial:?}");
    let loss = &runs[0].series[&contrai_doctor::Series::TrainLoss].points;
    assert_eq!(loss.len(), 40, "the odd entries are not points");
    assert!(loss.iter().all(|p| p.value < 9.0));
}

#[test]
fn a_log_followed_live_whose_last_record_stays_cut_short_is_said_at_its_end() {
    // A run that died while TensorBoard wrote its 61st record: 12 of its bytes are in the file.
    let dir = tempfile::tempdir().unwrap();
    let head = events(0, 60);
    let mut bytes = head.clone();
    bytes.extend_from_slice(&events(60, 61)[..12]);
    let file = dir.path().join("events.out.tfevents.1.host");
    std::fs::write(&file, &bytes).unwrap();
    let mut live = contrai_doctor::Live::new(std::slice::from_ref(&file), None, DoctorConfig::default());
    live.poll();
    // While the log may still grow, the record being written is no point yet and no cut.
    live.report_all();
    assert!(live.runs()[0].report.partial.is_empty());
    // Once it has ended, the live report is the doctor's after the fact: a partial read.
    live.finish();
    let after = diagnose(&read_path(&file, None).unwrap()[0], &DoctorConfig::default());
    assert_eq!(after.partial.len(), 1, "{:?}", after.partial);
    assert_eq!(live.runs()[0].report.partial, after.partial);
    assert_eq!(live.runs()[0].report.findings, after.findings);
}
