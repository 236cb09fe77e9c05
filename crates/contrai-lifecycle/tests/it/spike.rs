//! Spike triage driven by planted series: a simulated engine with a seeded batch order (replayed
//! after a rollback, keyed by step, as the Burn engine's is) reports each step's rows and batch
//! length; planted rows, steps and lengths make the losses spike.

use std::collections::{BTreeMap, BTreeSet};

use contrai_lifecycle::{
    Action, Conductor, Observation, Request, RestorePoint, RestoreScope, RunInfo, SkippedBatch, State,
};
use contrai_recipe::{Decay, Phase, Recipe};
use contrai_run::{DecisionKind, MetricsRow, QuarantineEntry, SpikeCause, TrainRow};
use contrai_testkit::engine::{Simulated, Transcript};

const ROWS: usize = 1000;
const BATCH: usize = 4;

/// What makes a step's loss spike.
#[derive(Default, Clone)]
struct Plant {
    /// Rows whose batch's loss is 20.
    bad_rows: BTreeSet<usize>,
    /// Steps whose first try spikes to 10 (an optimisation hiccup).
    once_at: Vec<u64>,
    /// Steps that spike on every try.
    always_at: Vec<u64>,
    /// Each step's batch length and a loss that follows it (`None`: no length reported).
    sawtooth: Option<bool>,
    /// The engine reports no rows.
    no_rows: bool,
}

/// Where the batch order stands: epoch and position in it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Cursor {
    epoch: u64,
    pos: usize,
}

struct Sim {
    plant: Plant,
    step: u64,
    cursor: Cursor,
    dropped: Vec<usize>,
    skipped: Vec<SkippedBatch>,
    tries: BTreeMap<u64, u32>,
    /// `tries` as each step's latest checkpoint was written (a resume from it starts there).
    tries_at: BTreeMap<u64, BTreeMap<u64, u32>>,
    history: Vec<MetricsRow>,
    checkpoints: BTreeMap<u64, (State, usize, Cursor)>,
    /// The rows each step trained on (the last try of each step).
    trained: BTreeMap<u64, Vec<u64>>,
    quarantine: Vec<QuarantineEntry>,
    /// Every turn the conductor gave, and how the run ended.
    log: Transcript,
}

fn info() -> RunInfo {
    RunInfo {
        train_samples: ROWS,
        classes: 2,
        weights: vec!["layers.0.weight".into(), "head.weight".into()],
        heads: None,
        job_steps: None,
        gradient_checkpointing: None,
        tuning: None,
        task: contrai_lifecycle::Task::Classification,
    }
}

/// Main alone, 600 steps at a constant LR, evaluated and checkpointed every 10.
fn recipe() -> Recipe {
    let mut r = Recipe::default();
    r.run.phases = vec![Phase::Main];
    r.main.steps = 600;
    r.main.batch = BATCH;
    r.main.schedule = Decay::Constant;
    r.main.warmup = 0.0;
    r.run.eval_every = 10;
    r.run.checkpoint_every = 10;
    r.guards.overfit_patience = 10_000;
    r
}

/// A deterministic ±5 % wobble.
fn wobble(step: u64) -> f32 {
    1.0 + 0.05 * (((step * 7919) % 101) as f32 / 50.0 - 1.0)
}

impl Sim {
    fn new(plant: Plant) -> Sim {
        Sim {
            plant,
            step: 0,
            cursor: Cursor::default(),
            dropped: Vec::new(),
            skipped: Vec::new(),
            tries: BTreeMap::new(),
            tries_at: BTreeMap::new(),
            history: Vec::new(),
            checkpoints: BTreeMap::new(),
            trained: BTreeMap::new(),
            quarantine: Vec::new(),
            log: Transcript::default(),
        }
    }

    /// The rows in use, in epoch `e`'s order.
    fn order(&self, e: u64) -> Vec<usize> {
        let mut rows: Vec<usize> = (0..ROWS)
            .filter(|r| self.dropped.binary_search(r).is_err())
            .collect();
        rows.sort_by_key(|r| (((*r as u64 + 1) * 2_654_435_761) ^ ((e + 1) * 40_503)) % 1_000_003);
        rows
    }

    /// The next batch in the order.
    fn next_batch(&mut self) -> Vec<u64> {
        let order = self.order(self.cursor.epoch);
        if self.cursor.pos + BATCH > order.len() {
            self.cursor = Cursor {
                epoch: self.cursor.epoch + 1,
                pos: 0,
            };
            return self.next_batch();
        }
        let mut rows: Vec<u64> = order[self.cursor.pos..self.cursor.pos + BATCH]
            .iter()
            .map(|r| *r as u64)
            .collect();
        self.cursor.pos += BATCH;
        rows.sort_unstable();
        rows
    }

    /// Step `step`'s batch, passing over the batches triage skipped at that step.
    fn draw(&mut self, step: u64) -> Vec<u64> {
        let mut named: Vec<Vec<u64>> = self
            .skipped
            .iter()
            .filter(|b| b.step == step)
            .map(|b| b.rows.clone())
            .collect();
        loop {
            let rows = self.next_batch();
            match named.iter().position(|r| *r == rows || r.is_empty()) {
                Some(i) => {
                    named.swap_remove(i);
                }
                None => return rows,
            }
        }
    }

    /// The planted loss and length of step `step` on `rows`.
    fn loss(&mut self, step: u64, rows: &[u64]) -> (f32, Option<f32>) {
        let tries = self.tries.entry(step).or_default();
        *tries += 1;
        let p = &self.plant;
        // A falling curve (no plateau for the live doctor to cut), ±5 % from step to step.
        let mut loss = (1.0 - step as f32 / 1200.0) * wobble(step);
        let mut length = None;
        if let Some(with_length) = p.sawtooth {
            // Length-grouped batches: 40–60 tokens, and a 400-token batch every 25 steps.
            let tokens = if step % 25 == 7 {
                400.0
            } else {
                40.0 + (step % 21) as f32
            };
            loss = 0.01 * tokens * wobble(step);
            length = with_length.then_some(tokens);
        }
        if rows.iter().any(|r| p.bad_rows.contains(&(*r as usize))) {
            loss = 20.0;
        }
        if p.always_at.contains(&step) || (p.once_at.contains(&step) && *tries == 1) {
            loss = 10.0;
        }
        (loss, length)
    }

    /// The LR each try of `step` ran at.
    fn lrs_of(&self, step: u64) -> Vec<f64> {
        self.lrs()
            .into_iter()
            .filter(|(s, ..)| *s == step)
            .map(|(.., lr)| lr)
            .collect()
    }
}

impl Simulated for Sim {
    fn transcript(&mut self) -> &mut Transcript {
        &mut self.log
    }

    fn act(&mut self, a: &Action) {
        match a {
            Action::Checkpoint { state, .. } => {
                assert_eq!(state.step, self.step);
                let at = ((**state).clone(), self.history.len(), self.cursor);
                self.checkpoints.insert(self.step, at);
                self.tries_at.insert(self.step, self.tries.clone());
            }
            Action::DropSamples { rows } => self.dropped = rows.clone(),
            Action::SkipBatches { batches } => self.skipped = batches.clone(),
            Action::Quarantine(e) => self.quarantine.push(e.clone()),
            _ => {}
        }
    }

    fn answer(&mut self, r: &Request) -> Observation {
        match r {
            Request::Train(plan) => {
                assert_eq!(plan.step, self.step);
                let step = plan.step + 1;
                let rows = self.draw(step);
                let (loss, length) = self.loss(step, &rows);
                self.step = step;
                self.trained.insert(step, rows.clone());
                self.history.push(MetricsRow::Train(TrainRow {
                    step,
                    phase: plan.phase,
                    samples: step * BATCH as u64,
                    train_loss: loss,
                    lr: plan.lr,
                    grad_norm: 1.0,
                    batch_size: BATCH,
                    wall_s: 0.0,
                }));
                Observation::Stepped {
                    loss: Some(loss),
                    grad_norm: Some(1.0),
                    lr: plan.lr,
                    rows: if self.plant.no_rows { Vec::new() } else { rows },
                    length,
                }
            }
            Request::Evaluate { .. } => Observation::Evaluated {
                val_loss: 0.5,
                val_accuracy: 0.8,
            },
            Request::Restore { to, scope } => {
                let RestorePoint::Before(below) = *to else {
                    panic!("a spike rolls back below the step before it, got {to:?}");
                };
                assert_eq!(*scope, RestoreScope::Everything);
                let at = *self
                    .checkpoints
                    .range(..below)
                    .next_back()
                    .or_else(|| self.checkpoints.last_key_value())
                    .unwrap()
                    .0;
                let (state, rows, cursor) = self.checkpoints[&at].clone();
                self.step = at;
                self.cursor = cursor;
                self.history.truncate(rows);
                self.trained.retain(|s, _| *s <= at);
                Observation::Restored {
                    state: Box::new(state),
                    history: self.history.clone(),
                }
            }
            Request::Export => Observation::Exported {
                val_loss: 0.5,
                val_accuracy: 0.8,
            },
            Request::Distil => Observation::Declined {
                what: "student".into(),
                instead: "none".into(),
            },
            Request::Quantize { .. } => Observation::Declined {
                what: "int8".into(),
                instead: "none".into(),
            },
            Request::ReadHoldout { .. } => Observation::HoldoutRead {
                loss: 0.5,
                accuracy: 0.8,
                samples: 10,
                quantized: Vec::new(),
            },
            other => panic!("not asked in these runs: {other:?}"),
        }
    }
}

impl std::ops::Deref for Sim {
    type Target = Transcript;

    fn deref(&self) -> &Transcript {
        &self.log
    }
}

fn simulate(recipe: Recipe, plant: Plant) -> Sim {
    let mut sim = Sim::new(plant);
    let mut c = Conductor::new(recipe, info());
    let first = c.begin().unwrap();
    sim.run(&mut c, first);
    sim
}

/// A row that the order draws in epoch 0 after the history is long enough, and again in epoch 1.
fn bad_row() -> usize {
    let sim = Sim::new(Plant::default());
    sim.order(0)[40 * BATCH + 1]
}

#[test]
fn a_spike_rolls_back_to_the_last_checkpoint_and_quarantines_its_batch() {
    let bad = bad_row();
    let plant = Plant {
        bad_rows: [bad].into(),
        ..Plant::default()
    };
    let sim = simulate(recipe(), plant);
    assert_eq!(sim.end, Some(Ok(())), "the run goes on");
    let first = sim.of_kind(DecisionKind::RollbackSpike);
    assert_eq!(first.len(), 1, "{:?}", sim.decisions());
    assert_eq!(first[0].step, 41, "the 41st batch holds the planted row");
    assert!(
        first[0].reason.contains("skipped and quarantined"),
        "{}",
        first[0].reason
    );
    let q = &sim.quarantine[0];
    assert_eq!((q.step, q.cause, q.loss), (41, SpikeCause::Undetermined, 20.0));
    assert!(q.rows.contains(&(bad as u64)) && q.rows.len() == BATCH, "{q:?}");
    assert!(q.threshold > 1.0 && q.threshold < 20.0, "{q:?}");
    // The retry of step 41 replays from the checkpoint of step 40 and passes over the batch.
    assert_ne!(
        sim.trained[&41], q.rows,
        "the quarantined batch is not trained again"
    );
    assert_eq!(
        sim.quarantine.iter().filter(|q| q.step == 41).count(),
        1,
        "the retry did not spike"
    );
    assert!(!sim.trained[&41].contains(&(bad as u64)));
}

#[test]
fn the_same_rows_spiking_again_leave_the_training_set_as_a_data_cause() {
    let bad = bad_row();
    let plant = Plant {
        bad_rows: [bad].into(),
        ..Plant::default()
    };
    let sim = simulate(recipe(), plant);
    assert_eq!(sim.end, Some(Ok(())));
    let data = sim.of_kind(DecisionKind::DropSpiking);
    assert_eq!(data.len(), 1, "{:?}", sim.decisions());
    assert!(data[0].step >= 250, "in epoch 1: {}", data[0].step);
    assert_eq!(data[0].evidence["left"], serde_json::json!([bad]));
    assert_eq!(data[0].evidence["cause"], "data");
    let q = sim.quarantine.last().unwrap();
    assert_eq!((q.cause, q.left.clone()), (SpikeCause::Data, vec![bad as u64]));
    assert!(sim.dropped.contains(&bad), "the engine was told to drop it");
    // After it left, no step trains it and nothing spikes again; the LR was never cut.
    let after: Vec<&u64> = sim.trained.range(data[0].step..).flat_map(|(_, r)| r).collect();
    assert!(!after.contains(&&(bad as u64)));
    assert_eq!(sim.restores(), 2);
    assert!(sim.of_kind(DecisionKind::LrCutSpike).is_empty());
}

#[test]
fn other_rows_spiking_cut_the_lr_as_an_optimisation_cause() {
    let plant = Plant {
        once_at: vec![45, 77],
        ..Plant::default()
    };
    let sim = simulate(recipe(), plant);
    assert_eq!(sim.end, Some(Ok(())));
    assert_eq!(sim.of_kind(DecisionKind::RollbackSpike).len(), 1);
    let cut = sim.of_kind(DecisionKind::LrCutSpike);
    assert_eq!(cut.len(), 1, "{:?}", sim.decisions());
    assert_eq!(
        (cut[0].step, &cut[0].evidence["cause"]),
        (77, &serde_json::json!("optimisation"))
    );
    let causes: Vec<SpikeCause> = sim.quarantine.iter().map(|q| q.cause).collect();
    assert_eq!(causes, [SpikeCause::Undetermined, SpikeCause::Optimisation]);
    // The first spike leaves the LR alone; the second halves it from the replay on, for good.
    let lr45 = sim.lrs_of(45);
    assert_eq!(lr45[0], lr45[1]);
    let lr77 = sim.lrs_of(77);
    assert!((lr77[1] - 0.5 * lr77[0]).abs() < 1e-15, "{lr77:?}");
    assert!(
        (sim.lrs_of(71)[1] - 0.5 * sim.lrs_of(71)[0]).abs() < 1e-15,
        "replayed at the cut LR"
    );
    assert!((sim.lrs_of(600)[0] - 0.5 * lr45[0]).abs() < 1e-15);
    // An engine that reports no rows: the same spikes, the same causes (no data cause possible).
    let blind = Plant {
        once_at: vec![45, 77],
        no_rows: true,
        ..Plant::default()
    };
    let sim = simulate(recipe(), blind);
    assert_eq!(sim.of_kind(DecisionKind::LrCutSpike).len(), 1);
    assert!(sim.quarantine.iter().all(|q| q.rows.is_empty()));
}

#[test]
fn spikes_after_every_retry_stop_the_run_with_the_evidence() {
    let mut r = recipe();
    r.guards.spike_retries = 3;
    let plant = Plant {
        always_at: vec![45],
        ..Plant::default()
    };
    let sim = simulate(r, plant);
    assert!(
        matches!(&sim.end, Some(Err(e)) if e.contains("Diverged")),
        "{:?}",
        sim.end
    );
    assert_eq!(sim.restores(), 3);
    let abort = sim.of_kind(DecisionKind::AbortSpike);
    assert_eq!(abort.len(), 1);
    let spikes = abort[0].evidence["spikes"].as_array().unwrap();
    assert_eq!(spikes.len(), 3);
    assert!(spikes.iter().all(|s| s["step"] == 45 && s["loss"] == 10.0));
    assert_eq!(spikes[0]["cause"], "undetermined");
    assert_eq!(spikes[2]["cause"], "optimisation");
    assert!(abort[0].reason.contains("giving up"), "{}", abort[0].reason);
    assert_eq!(
        sim.quarantine.len(),
        3,
        "the aborting spike is the evidence, not a quarantine"
    );
}

#[test]
fn a_sawtooth_that_follows_batch_length_gets_no_action() {
    let plant = Plant {
        sawtooth: Some(true),
        ..Plant::default()
    };
    let sim = simulate(recipe(), plant);
    assert_eq!(sim.end, Some(Ok(())));
    assert_eq!(sim.restores(), 0, "{:?}", sim.decisions());
    assert!(sim.quarantine.is_empty());
    let benign = sim.of_kind(DecisionKind::BenignSpike);
    assert_eq!(benign.len(), 1, "noted once");
    assert_eq!(benign[0].evidence["length"], 400.0);
    // Without the lengths the same losses are spikes.
    let blind = Plant {
        sawtooth: Some(false),
        ..Plant::default()
    };
    let sim = simulate(recipe(), blind);
    assert!(sim.restores() > 0);
}

/// `whole` resumed from its latest checkpoint of step `at` (its state through serde, as a
/// killed run reads it back): the resumed run, whose turns must be `whole`'s after that write.
fn resumed_alike(whole: &Sim, plant: Plant, at: u64) -> Sim {
    let (state, rows, cursor) = whole.checkpoints[&at].clone();
    let json = serde_json::to_string(&state).unwrap();
    let back: State = serde_json::from_str(&json).unwrap();
    assert_eq!(back, state);
    let mut sim = Sim::new(plant);
    sim.step = at;
    sim.cursor = cursor;
    sim.history = whole.history[..rows].to_vec();
    sim.checkpoints = whole
        .checkpoints
        .range(..=at)
        .map(|(k, v)| (*k, v.clone()))
        .collect();
    sim.tries = whole.tries_at[&at].clone();
    let mut c = Conductor::resume(recipe(), info(), back, &sim.history).unwrap();
    let first = c.begin().unwrap();
    sim.run(&mut c, first);
    let written = whole
        .turns
        .iter()
        .rposition(|t| {
            t.actions
                .iter()
                .any(|a| matches!(a, Action::Checkpoint { state: s, .. } if **s == state))
        })
        .unwrap();
    assert_eq!(whole.turns[written].request, sim.turns[0].request);
    let (a, b) = (&whole.turns[written + 1..], &sim.turns[1..]);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x, y, "turn {i} after the resume differs");
    }
    assert_eq!(a.len(), b.len());
    sim
}

#[test]
fn the_state_round_trips_through_serde_mid_triage_and_the_run_continues_alike() {
    let plant = Plant {
        bad_rows: [bad_row()].into(),
        once_at: vec![120],
        ..Plant::default()
    };
    let whole = simulate(recipe(), plant.clone());
    // The checkpoint after the first spike and the LR cut: the triage remembers both.
    let at = 130;
    let state = &whole.checkpoints[&at].0;
    assert_eq!(state.triage.spikes.len(), 2, "{:?}", state.triage);
    assert_eq!(state.triage.lr_factor, 0.5);
    let sim = resumed_alike(&whole, plant, at);
    assert!(
        sim.turns[0]
            .actions
            .iter()
            .any(|a| matches!(a, Action::SkipBatches { batches } if batches.len() == 2)),
        "the resume restates the skipped batches: {:?}",
        sim.turns[0]
    );
    assert_eq!(
        sim.of_kind(DecisionKind::DropSpiking).len(),
        1,
        "the resumed run still knows the suspect rows"
    );
}

#[test]
fn the_checkpoint_a_rollback_lands_on_is_written_again_knowing_it() {
    // A spike at 120 rolls back to 110 (below 119's): 110's checkpoint is written again with the
    // spike in the triage's memory, so a run killed right after the rollback resumes as it went on.
    let plant = Plant {
        once_at: vec![120, 150],
        ..Plant::default()
    };
    let whole = simulate(recipe(), plant.clone());
    let state = &whole.checkpoints[&110].0;
    assert_eq!(state.triage.spikes.len(), 1, "{:?}", state.triage);
    let sim = resumed_alike(&whole, plant, 110);
    assert_eq!(
        sim.of_kind(DecisionKind::LrCutSpike).len(),
        1,
        "the second spike is the second"
    );
}

#[test]
fn the_default_run_never_spikes_and_keeps_a_margin() {
    use contrai_lifecycle::spike_triage::{Judged, Score, Window, judge};
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../contrai-train/tests/golden/default-run/x86_64-avx2/metrics.jsonl");
    let text = std::fs::read_to_string(&golden).unwrap();
    let g = Recipe::default().guards;
    let (mut w, mut top_z, mut top_over) = (Window::default(), f64::MIN, f64::MIN);
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let Some(loss) = row["train_loss"].as_f64().map(|l| l as f32) else {
            continue;
        };
        assert_eq!(judge(&w, loss, None, &g), Judged::Normal, "step {}", row["step"]);
        if w.points.len() >= g.spike_history {
            let logs: Vec<f64> = w.points.iter().map(|p| f64::from(p.0).ln()).collect();
            let s = Score::of(&logs, f64::from(loss).ln());
            (top_z, top_over) = (top_z.max(s.z), top_over.max(s.over_max));
        }
        w.push(loss, None, g.spike_window);
    }
    println!(
        "default run: highest robust z {top_z:.2}, highest loss over the window's highest {top_over:.2}"
    );
    assert!(
        top_z < g.spike_z / 2.0 && top_over < g.spike_over_max / 2.0,
        "{top_z} {top_over}"
    );
}
