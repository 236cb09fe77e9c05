//! A simulated engine for the conductor's tests: the turn loop every engine runs (carry out the
//! turn's actions, answer its request, hand the answer back), with what is acted and answered left
//! to each test's plant, and a transcript of every turn to read the conductor's decisions from.

use contrai_lifecycle::{Action, Conductor, Observation, Request, Turn};
use contrai_recipe::Phase;
use contrai_run::{Decision, DecisionKind};

/// What a simulated engine does with the conductor's turns; `run` is the loop a real engine runs.
pub trait Simulated {
    /// Carries out one action of a turn (a checkpoint, a phase change, a data action).
    fn act(&mut self, action: &Action);
    /// Answers a request (never `Finish` or `Fail`, which end the run) as a real engine would.
    fn answer(&mut self, request: &Request) -> Observation;
    /// Where the turns and the run's end are written.
    fn transcript(&mut self) -> &mut Transcript;

    /// Runs `conductor` from `first` to the end, writing every turn into the transcript.
    fn run(&mut self, conductor: &mut Conductor, first: Turn) {
        let mut turn = first;
        loop {
            self.transcript().turns.push(turn.clone());
            for a in &turn.actions {
                self.act(a);
            }
            let observed = match &turn.request {
                Request::Finish(_) => return self.transcript().end = Some(Ok(())),
                Request::Fail(f) => return self.transcript().end = Some(Err(format!("{f:?}"))),
                r => self.answer(r),
            };
            turn = conductor
                .observe(observed)
                .expect("the conductor accepts every answer");
        }
    }
}

/// Every turn the conductor gave a simulated engine, in order, and how the run ended.
#[derive(Debug, Default)]
pub struct Transcript {
    /// The turns, the first included.
    pub turns: Vec<Turn>,
    /// `Ok` finished, `Err` failed (the failure's debug form); `None` while running.
    pub end: Option<Result<(), String>>,
}

impl Transcript {
    /// Every decision recorded, in order.
    pub fn decisions(&self) -> Vec<&Decision> {
        self.turns
            .iter()
            .flat_map(|t| &t.actions)
            .filter_map(|a| match a {
                Action::Record(d) => Some(d),
                _ => None,
            })
            .collect()
    }

    /// The kinds of every decision recorded, in order.
    pub fn kinds(&self) -> Vec<DecisionKind> {
        self.decisions().iter().map(|d| d.kind).collect()
    }

    /// The decisions of one kind, in order.
    pub fn of_kind(&self, kind: DecisionKind) -> Vec<&Decision> {
        self.decisions().into_iter().filter(|d| d.kind == kind).collect()
    }

    /// The first decision of `kind`; panics naming the kinds recorded when there is none.
    pub fn decision(&self, kind: DecisionKind) -> &Decision {
        let kinds = self.kinds();
        self.decisions()
            .into_iter()
            .find(|d| d.kind == kind)
            .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
    }

    /// How many restores the conductor asked for.
    pub fn restores(&self) -> usize {
        self.turns
            .iter()
            .filter(|t| matches!(t.request, Request::Restore { .. }))
            .count()
    }

    /// The step (1-based), phase and LR of every training step asked for, tries included.
    pub fn lrs(&self) -> Vec<(u64, Phase, f64)> {
        self.turns
            .iter()
            .filter_map(|t| match &t.request {
                Request::Train(p) => Some((p.step + 1, p.phase, p.lr)),
                _ => None,
            })
            .collect()
    }
}
