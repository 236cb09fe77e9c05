//! Contrai's trainer on Burn: models, the training loop, checkpoints with exact resume, and the
//! contraction controller (`../shared/DESIGN.md` §1–3). Filled in by the training issue.
