//! Contrai's recipe: the TOML schema and its validation, learning-rate schedule math, the phase
//! plan and the calendar planner (`../shared/DESIGN.md` §4). Filled in by the training issue.
