//! Contrai's recipe: the TOML schema, its typed choices and their validation, the learning-rate
//! schedule math and the calendar of a long programme (`../shared/DESIGN.md` §1). The phase plan
//! computed from a recipe is the conductor's (`contrai-lifecycle`).

pub mod calendar;
pub mod choice;
pub mod load;
pub mod recipe;
pub mod schedule;
pub mod size;
pub mod template;

pub use choice::{
    Dedup, ModelKind, OnConflict, Phase, Pooling, Precision, PruneSchedule, PruneScope, Quantizations,
    Quantize,
};
pub use load::RecipeError;
pub use recipe::Recipe;
pub use schedule::{Decay, Schedule};
pub use size::{MAX_STEPS, TrainingMemory};
pub use template::{Checkpoint, default_recipe, job_recipe, pretrained_recipe};
