//! The calendar of a long programme: the lifecycle's phases laid over weeks, sprints with
//! recovery windows on unstable infrastructure, and the cost.

use serde::Serialize;

/// Weeks of each phase in the reference 20-week programme (1–3, 4–12, 13–14, 15–18, 19–20).
pub const REFERENCE_WEEKS: [(&str, u32); 5] = [
    ("validate", 3),
    ("main", 9),
    ("diagnose", 2),
    ("contract", 4),
    ("refine", 2),
];
/// Sprint length on unstable infrastructure.
pub const SPRINT_WEEKS: u32 = 4;
/// Days at the end of each sprint kept free to recover lost work.
pub const RECOVERY_DAYS: u32 = 3;

/// One phase on the calendar.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalendarPhase {
    /// The phase.
    pub name: &'static str,
    /// First week (1-based).
    pub first_week: u32,
    /// Last week.
    pub last_week: u32,
}

/// A sprint and its recovery window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sprint {
    /// 1-based number.
    pub number: u32,
    /// First week.
    pub first_week: u32,
    /// Last week.
    pub last_week: u32,
    /// Recovery window: the last days of the last week.
    pub recovery_days: u32,
}

/// A programme over a number of weeks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calendar {
    /// Weeks in all.
    pub weeks: u32,
    /// Phases, in order, covering every week.
    pub phases: Vec<CalendarPhase>,
    /// Sprints (only on unstable infrastructure).
    pub sprints: Vec<Sprint>,
    /// Days in all.
    pub days: u32,
    /// Days × cost per day, when a cost was given.
    pub cost: Option<f64>,
}

/// Why a calendar cannot be made.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CalendarError {
    /// Fewer weeks than phases.
    #[error("{0} weeks cannot hold the 5 phases: give at least 5")]
    TooShort(u32),
    /// A negative or non-finite cost.
    #[error("cost per day {0} must be a finite number ≥ 0")]
    Cost(f64),
}

impl Calendar {
    /// Scales the reference programme to `weeks`, at least one week a phase.
    pub fn new(
        weeks: u32,
        unstable_infra: bool,
        cost_per_day: Option<f64>,
    ) -> Result<Calendar, CalendarError> {
        if weeks < REFERENCE_WEEKS.len() as u32 {
            return Err(CalendarError::TooShort(weeks));
        }
        if let Some(c) = cost_per_day.filter(|c| !c.is_finite() || *c < 0.0) {
            return Err(CalendarError::Cost(c));
        }
        let lengths = scale(weeks);
        let mut first = 1;
        let phases = REFERENCE_WEEKS
            .iter()
            .zip(lengths)
            .map(|(&(name, _), n)| {
                let p = CalendarPhase {
                    name,
                    first_week: first,
                    last_week: first + n - 1,
                };
                first += n;
                p
            })
            .collect();
        let sprints = if unstable_infra {
            (0..weeks.div_ceil(SPRINT_WEEKS))
                .map(|k| Sprint {
                    number: k + 1,
                    first_week: k * SPRINT_WEEKS + 1,
                    last_week: ((k + 1) * SPRINT_WEEKS).min(weeks),
                    recovery_days: RECOVERY_DAYS,
                })
                .collect()
        } else {
            Vec::new()
        };
        let days = weeks * 7;
        Ok(Calendar {
            weeks,
            phases,
            sprints,
            days,
            cost: cost_per_day.map(|c| c * days as f64),
        })
    }
}

/// Week counts a phase for `weeks` in all: proportional to the reference, largest remainders
/// first, and at least one each.
fn scale(weeks: u32) -> Vec<u32> {
    let total: u32 = REFERENCE_WEEKS.iter().map(|p| p.1).sum();
    let exact: Vec<f64> = REFERENCE_WEEKS
        .iter()
        .map(|p| p.1 as f64 * weeks as f64 / total as f64)
        .collect();
    let mut out: Vec<u32> = exact.iter().map(|e| (e.floor() as u32).max(1)).collect();
    let mut order: Vec<usize> = (0..out.len()).collect();
    order.sort_by(|&a, &b| {
        (exact[b] - exact[b].floor())
            .total_cmp(&(exact[a] - exact[a].floor()))
            .then(a.cmp(&b))
    });
    let mut k = 0;
    while out.iter().sum::<u32>() < weeks {
        out[order[k % order.len()]] += 1;
        k += 1;
    }
    while out.iter().sum::<u32>() > weeks {
        // Take from the longest phase (main), never below one week.
        let i = (0..out.len()).max_by_key(|&i| out[i]).unwrap_or(1);
        out[i] -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weeks(c: &Calendar) -> Vec<(u32, u32)> {
        c.phases.iter().map(|p| (p.first_week, p.last_week)).collect()
    }

    #[test]
    fn twenty_weeks_is_the_reference_programme() {
        let c = Calendar::new(20, false, Some(100.0)).unwrap();
        assert_eq!(weeks(&c), vec![(1, 3), (4, 12), (13, 14), (15, 18), (19, 20)]);
        assert_eq!(c.cost, Some(14_000.0));
        assert!(c.sprints.is_empty());
    }

    #[test]
    fn other_lengths_scale_and_cover_every_week() {
        for n in [5, 8, 10, 13, 40, 52] {
            let c = Calendar::new(n, true, None).unwrap();
            assert_eq!(c.phases[0].first_week, 1);
            assert_eq!(c.phases[4].last_week, n);
            for w in c.phases.windows(2) {
                assert_eq!(w[1].first_week, w[0].last_week + 1);
                assert!(w[0].last_week >= w[0].first_week);
            }
            assert_eq!(c.sprints.len() as u32, n.div_ceil(4));
            assert_eq!(c.sprints.last().unwrap().last_week, n);
        }
        assert_eq!(
            weeks(&Calendar::new(10, false, None).unwrap()),
            vec![(1, 2), (3, 6), (7, 7), (8, 9), (10, 10)]
        );
        assert_eq!(Calendar::new(4, false, None), Err(CalendarError::TooShort(4)));
    }
}
