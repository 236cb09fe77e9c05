//! The engine's training step: the rows it draws (the phase's order, batches triage skipped),
//! the forward and backward pass with accumulation and clipping, and the row it records.

use super::*;

impl Engine<'_> {
    /// One optimizer step at the conductor's LR, with the phase's batch and dropout; a step whose
    /// loss or gradient norm is not finite is not applied (the conductor rolls back).
    pub(super) fn train_step(&mut self, plan: StepPlan) -> Result<Observation> {
        if plan.step != self.step {
            return Err(contrai_lifecycle::ConductorError::Protocol(format!(
                "the conductor asked for step {} at step {}",
                plan.step + 1,
                self.step
            ))
            .into());
        }
        let t0 = Instant::now();
        let r = &self.recipe;
        let (seed, accumulate) = (r.run.seed, r.main.accumulate);
        let p = r.model.dropout * self.order.dropout_scale;
        // Masks are keyed by the training step, validate's checks not counted: main draws the same
        // masks with or without `validate`, so a plain run is the lifecycle's paired comparison.
        let key = plan.step.saturating_sub(self.validate_steps);
        let micros = self.draw(plan.step + 1, accumulate)?;
        let mut batches = Vec::with_capacity(accumulate);
        let mut drops = Vec::with_capacity(accumulate);
        for (micro, rows) in micros.iter().enumerate() {
            batches.push(self.data.train.batch(rows, &self.device));
            drops.push((p > 0.0).then(|| Dropout::new(p, seed, key, micro as u64)));
        }
        let rows = step_rows(&micros);
        let poison = self.opts.inject_nonfinite_at == Some(plan.step + 1) && !self.injected;
        self.injected |= poison;
        let recompute = self.recipe.model.gradient_checkpointing;
        let (mut grads, loss) = step_grads(&self.net.model, &batches, &drops, poison, recompute);
        let norm = grad_norm(&self.net.model, &grads);
        if loss.is_finite() && norm.is_finite() {
            clip_grads(&self.net.model, &mut grads, norm, self.recipe.main.clip_norm);
            let stepped = self.net.optim.step(plan.lr, self.net.model.clone(), grads);
            self.net.model = apply_masks(stepped, &self.net.masks);
            self.clock.step_s += t0.elapsed().as_secs_f64();
            self.clock.steps += 1;
            self.record_step(plan, loss, norm)?;
            self.say_pace();
        }
        Ok(Observation::Stepped {
            loss: Some(loss),
            grad_norm: Some(norm),
            lr: plan.lr,
            length: self.data.train.mean_length(&micros.concat()),
            rows,
        })
    }

    /// The `accumulate` micro-batches of step `step` (1-based): the next in the batch order,
    /// passing over a batch spike triage skipped when the step draws it again — the order after
    /// a rollback is the same, keyed by step, so the retry trains on the batch after it (one
    /// whose rows the engine did not report, `rows` empty, passes over the step's first draw).
    pub(super) fn draw(&mut self, step: u64, accumulate: usize) -> Result<Vec<Vec<usize>>> {
        let at_step = self.order.skipped.iter().filter(|b| b.step == step);
        let (blind, mut named): (Vec<_>, Vec<_>) = at_step.map(|b| b.rows.clone()).partition(Vec::is_empty);
        let mut blind = blind.len();
        loop {
            let micros = (0..accumulate)
                .map(|_| self.next_rows())
                .collect::<Result<Vec<_>>>()?;
            let rows = step_rows(&micros);
            if let Some(i) = named.iter().position(|r| *r == rows) {
                named.swap_remove(i);
            } else if blind > 0 {
                blind -= 1;
            } else {
                return Ok(micros);
            }
            self.journal
                .say(&format!("step {step}: a quarantined batch passed over"));
        }
    }

    /// The next micro-batch's training rows (the batch order rebuilt after the settings changed).
    pub(super) fn next_rows(&mut self) -> Result<Vec<usize>> {
        let o = &mut self.order;
        if o.batcher.is_none() {
            let salt = match o.phase {
                Phase::Contract => 0xC0,
                Phase::Refine => 0x7E,
                _ => 0,
            };
            o.batcher = Some(Batcher::new(
                o.rows.len(),
                o.batch,
                self.recipe.run.seed ^ salt,
                o.cursor,
            )?);
        }
        let Some(batcher) = o.batcher.as_mut() else {
            unreachable!("built just above")
        };
        let rows = batcher.next_batch().into_iter().map(|i| o.rows[i]).collect();
        o.cursor = batcher.cursor;
        Ok(rows)
    }

    /// Counts a finished step and writes its row.
    pub(super) fn record_step(&mut self, plan: StepPlan, loss: f32, norm: f32) -> Result<()> {
        let eff = self.order.batch * self.recipe.main.accumulate;
        self.step += 1;
        self.samples += eff as u64;
        self.last = (loss, plan.lr);
        let wall = self.clock.wall();
        self.wall_s = (wall * 1000.0).round() / 1000.0;
        self.journal.metric(MetricsRow::Train(TrainRow {
            step: self.step,
            phase: plan.phase,
            samples: self.samples,
            train_loss: loss,
            lr: plan.lr,
            grad_norm: norm,
            batch_size: eff,
            wall_s: (wall * 100.0).round() / 100.0,
        }))?;
        let msg = format!("{}  loss {loss:.4}  lr {:.2e}", plan.phase, plan.lr);
        self.journal.progress(self.step, Some(msg));
        Ok(())
    }

    /// Once a session, at its [`PACE_STEPS`]-th timed step: this machine's time a step and what
    /// the run's remaining planned steps will take at it (evaluations and checkpoints come on top).
    pub(super) fn say_pace(&self) {
        if self.clock.steps != PACE_STEPS {
            return;
        }
        let ms = 1000.0 * self.clock.step_s / self.clock.steps as f64;
        let left = contrai_lifecycle::PhaseSteps::new(&self.recipe)
            .all()
            .saturating_sub(self.step);
        let secs = (ms * left as f64 / 1000.0).round() as u64;
        self.journal.say(&format!(
            "pace: {ms:.0} ms a step on this machine; the {left} planned steps left take about {} min {:02} s (evaluations, checkpoints and distillation come on top)",
            secs / 60,
            secs % 60
        ));
    }
}
