//! Contrai's doctor: reads training logs of any framework and diagnoses them, offline or live.
//!
//! The same [`Doctor`] serves both uses: a live trainer feeds points one at a time with
//! [`Doctor::push`] and collects newly emitted findings; [`diagnose`] replays a parsed log
//! ([`Run`]) through the very same code path.

#![warn(missing_docs)]

pub mod detect;
pub mod doctor;
pub mod finding;
pub mod live;
pub mod read;
pub mod series;
pub mod stated_setup;
pub use contrai_stats as stats;
pub mod tags;

pub use doctor::{Doctor, DoctorConfig, Report, diagnose, report_of};
pub use finding::{Boundary, Break, Confidence, Detail, Finding, Label, Reading, Resume, Severity};
pub use live::{Live, LiveRun};
pub use read::{Format, ReadError, Skipped, Tail, TrackingLocation, read_path, read_path_noting};
pub use series::{
    Cut, LogOrder, LossPart, Marker, Partial, Point, Run, RunHints, Series, SeriesData, Task, XUnit,
};
pub use stated_setup::{LrSchedule, Setting, Setup};
