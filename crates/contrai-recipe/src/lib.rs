//! Contrai's recipe: the TOML schema and its validation, learning-rate schedule math, and the
//! phase plan (`../shared/DESIGN.md` §1 and §4).

pub mod calendar;
pub mod load;
pub mod plan;
pub mod recipe;
pub mod schedule;
pub mod template;

pub use load::RecipeError;
pub use plan::Plan;
pub use recipe::Recipe;
pub use schedule::{Decay, Schedule};
pub use template::DEFAULT_RECIPE;
