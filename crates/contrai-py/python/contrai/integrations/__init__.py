"""Contrai inside the frameworks users train with: a callback for Hugging Face's ``Trainer``
(:mod:`contrai.integrations.hf`, which TRL's trainers are) and for Lightning's
(:mod:`contrai.integrations.lightning`), the hooks of Axolotl and LLaMA-Factory that attach it,
the tracker runs a job already writes to (``trackers``), Ray Data's sharded audit (``ray``), and
every reach past a framework's public API in ``_compat``. Nothing is imported until asked for:
each framework stays optional."""
