"""The conductor's protocol as Python types: the turns it answers with (``Turn``: ``Action``s and
one ``Request``) and the observations it takes (``Observation``), plus what they hold, and the
record a checkpoint keeps beside its tensors (``CheckpointRecord``).

Generated from the Rust types (``contrai_lifecycle::protocol`` and what it names) by
``crates/contrai-lifecycle/tests/it/python_protocol.rs``; do not edit: change the Rust type, then
run that test with ``CONTRAI_BLESS=1``. Serde's forms: a unit variant is its name as a string
(``"RoundTrip"``), any other variant a one-key dict (``{"Train": {...}}``); a measured value that
is not finite arrives as the word ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``.
"""

from __future__ import annotations

from typing import Any, Literal, Union

from typing_extensions import NotRequired, TypedDict


class ActionRecord(TypedDict):
    """Write this decision to `decisions.jsonl` and the console."""

    Record: "Decision"


class ActionSetPhaseFields(TypedDict):
    phase: "Phase"
    restart_order: bool


class ActionSetPhase(TypedDict):
    """Train in this phase from now on (its metrics rows carry its name)."""

    SetPhase: "ActionSetPhaseFields"


class ActionSetBatch(TypedDict):
    """Train on micro-batches of this many samples (per device)."""

    SetBatch: int


class ActionScaleDropout(TypedDict):
    """Scale every dropout probability of the model by this factor (from the recipe's values)."""

    ScaleDropout: float


class ActionDropSamplesFields(TypedDict):
    rows: list[int]


class ActionDropSamples(TypedDict):
    """Train without these training rows from now on (all rows dropped so far, sorted)."""

    DropSamples: "ActionDropSamplesFields"


class ActionReplan(TypedDict):
    """The plan as the run now stands (a phase was entered, or the run began): write `plan.json`."""

    Replan: "RunPlan"


class ActionQuarantine(TypedDict):
    """Append this entry to `quarantine.jsonl`, with the sample ids of its rows where the engine knows them (a spike's batch, taken out by spike triage)."""

    Quarantine: "QuarantineEntry"


class ActionSkipBatchesFields(TypedDict):
    batches: list["SkippedBatch"]


class ActionSkipBatches(TypedDict):
    """Never train these batches again (all skipped so far): when the step of one draws its rows again — a replay after a rollback — the engine draws the next batch in its order instead."""

    SkipBatches: "ActionSkipBatchesFields"


class ActionCheckpointFields(TypedDict):
    keep: list[int]
    state: "State"


class ActionCheckpoint(TypedDict):
    """Write a checkpoint of this step holding this state; keep the newest `run.keep_last` and these steps' checkpoints, delete the rest."""

    Checkpoint: "ActionCheckpointFields"


class CheckpointCadenceSteps(TypedDict):
    """Every this many optimizer steps."""

    Steps: int


class CheckpointRecord(TypedDict):
    """What a PyTorch engine's checkpoint keeps beside its tensors."""

    conductor: "State"
    decisions_len: int
    format: int
    frozen: NotRequired[list[str]]
    lost_steps: NotRequired[int]
    merged: NotRequired[bool]
    metrics_len: int
    next_lr: NotRequired[Union[float, None]]
    quarantine_len: NotRequired[int]
    samples: int
    step: int


class Contraction(TypedDict):
    """What the contraction remembers."""

    best: NotRequired[Union[tuple[int, float], None]]
    caps: dict[str, float]
    dropped: list[int]
    frozen: list[str]
    gap0: NotRequired[Union[float, None]]
    noisy_checked: bool
    sparsity_at_eval: dict[str, float]
    train_since_eval: tuple[float, int]
    worse_run: int


class Decision(TypedDict):
    """One decision: a line of `decisions.jsonl` and of the console."""

    evidence: Any
    kind: "DecisionKind"
    phase: "Phase"
    reason: str
    step: int


class Entered(TypedDict):
    """A phase as the run entered it."""

    lr0: float
    phase: "Phase"
    start: int
    steps: int


class FailureValidate(TypedDict):
    """The pipeline cannot learn (validate's check, or a checkpoint that does not round-trip)."""

    Validate: str


class FailureDiverged(TypedDict):
    """Non-finite losses or gradients, or loss spikes, after every allowed rollback."""

    Diverged: str


class JobFacts(TypedDict):
    """What is known of a job before its first step; `None` where its source cannot tell."""

    accumulation: NotRequired[Union[int, None]]
    checkpoint_every: NotRequired[Union["CheckpointCadence", None]]
    decay: NotRequired[Union["DecayShape", None]]
    devices: NotRequired[Union[int, None]]
    eval_split: NotRequired[Union[bool, None]]
    gradient_checkpointing: NotRequired[Union[bool, None]]
    holdout: NotRequired[Union[bool, None]]
    input_grads: NotRequired[Union[bool, None]]
    loss_over_window: NotRequired[Union[bool, None]]
    model_dtype: NotRequired[Union["Precision", None]]
    native_bf16: NotRequired[Union[bool, None]]
    peak_lr: NotRequired[Union[float, None]]
    per_device_batch: NotRequired[Union[int, None]]
    precision: NotRequired[Union["Precision", None]]
    recipe_precision: NotRequired[Union["Precision", None]]
    reentrant: NotRequired[Union[bool, None]]
    source: NotRequired[Union["FactsSource", None]]
    token_level_loss: NotRequired[Union[bool, None]]
    total_steps: NotRequired[Union[int, None]]
    tuning: NotRequired[Union["Tuning", None]]
    warmup_ratio: NotRequired[Union[float, None]]
    warmup_steps: NotRequired[Union[int, None]]


class LrSegment(TypedDict):
    """One straight or curved piece of the learning-rate schedule."""

    from_step: int
    lr_end: float
    lr_start: float
    shape: "LrShape"
    to_step: int


class ObservationPipelineCheckedFields(TypedDict):
    first_loss: float
    last_loss: float
    losses: NotRequired[list[float]]
    no_gradient: NotRequired[list[str]]
    val_loss: float


class ObservationPipelineChecked(TypedDict):
    """Validate's check: the batch's loss at its first and last step, the fresh model's validation loss."""

    PipelineChecked: "ObservationPipelineCheckedFields"


class ObservationRoundTrippedFields(TypedDict):
    identical: bool
    model_bytes: int
    optimizer_bytes: int


class ObservationRoundTripped(TypedDict):
    """The checkpoint round trip."""

    RoundTripped: "ObservationRoundTrippedFields"


class ObservationSteppedFields(TypedDict):
    grad_norm: NotRequired[Union[float, None]]
    length: NotRequired[Union[float, None]]
    loss: NotRequired[Union[float, None]]
    lr: float
    rows: NotRequired[list[int]]


class ObservationStepped(TypedDict):
    """An optimizer step finished (a non-finite loss or norm: it failed and was not applied)."""

    Stepped: "ObservationSteppedFields"


class ObservationEvaluatedFields(TypedDict):
    val_accuracy: float
    val_loss: float


class ObservationEvaluated(TypedDict):
    """An evaluation on validation."""

    Evaluated: "ObservationEvaluatedFields"


class ObservationRestoredFields(TypedDict):
    history: list[dict[str, Any]]
    state: "State"


class ObservationRestored(TypedDict):
    """A checkpoint was restored."""

    Restored: "ObservationRestoredFields"


class ObservationPrunedFields(TypedDict):
    sparsity: dict[str, float]


class ObservationPruned(TypedDict):
    """The masks were set: each masked module's sparsity."""

    Pruned: "ObservationPrunedFields"


class ObservationSampleLossesFields(TypedDict):
    ids: list[str]
    losses: list[float]


class ObservationSampleLosses(TypedDict):
    """Every training sample's loss, in row order, with the samples' ids."""

    SampleLosses: "ObservationSampleLossesFields"


class ObservationSensitivityFields(TypedDict):
    base: NotRequired[Union[float, None]]
    val_loss: dict[str, list[float]]


class ObservationSensitivity(TypedDict):
    """Validation loss of each module pruned alone to each level (in the order requested)."""

    Sensitivity: "ObservationSensitivityFields"


class ObservationJointLossFields(TypedDict):
    val_loss: float


class ObservationJointLoss(TypedDict):
    """Validation loss with all modules pruned at once."""

    JointLoss: "ObservationJointLossFields"


class ObservationExportedFields(TypedDict):
    val_accuracy: float
    val_loss: float


class ObservationExported(TypedDict):
    """The final model was written and evaluated."""

    Exported: "ObservationExportedFields"


class ObservationDistilledFields(TypedDict):
    best_step: int
    parameters: int
    teacher_parameters: int
    val_accuracy: float
    val_loss: float


class ObservationDistilled(TypedDict):
    """The student was distilled."""

    Distilled: "ObservationDistilledFields"


class ObservationQuantizedFields(TypedDict):
    bytes: int
    dense_bytes: int
    file: str
    scheme: str
    val_accuracy: float
    val_loss: float


class ObservationQuantized(TypedDict):
    """A quantized model was made and evaluated on validation."""

    Quantized: "ObservationQuantizedFields"


class ObservationDeclinedFields(TypedDict):
    instead: str
    what: str


class ObservationDeclined(TypedDict):
    """The engine cannot carry out the request (a student, an int8 model …): what it did instead. Recorded as an `engine_substitute` decision; the lifecycle goes on without it."""

    Declined: "ObservationDeclinedFields"


class ObservationHoldoutReadFields(TypedDict):
    accuracy: float
    loss: float
    quantized: list["QuantHoldout"]
    samples: int


class ObservationHoldoutRead(TypedDict):
    """The holdout was read and every model evaluated on it."""

    HoldoutRead: "ObservationHoldoutReadFields"


class PhasePlan(TypedDict):
    """One phase of the lifecycle."""

    batch: int
    dropout_scale: float
    entered: NotRequired[bool]
    lr: list["LrSegment"]
    name: "Phase"
    purpose: str
    samples: int
    start_step: int
    steps: int


class PreflightFinding(TypedDict):
    """One thing wrong with a job's configuration."""

    evidence: Any
    kind: "PreflightKind"
    message: str
    severity: "PreflightSeverity"


class PruneOrder(TypedDict):
    """Pruning masks to set: a target for every weight matrix to prune, by parameter path."""

    heads: NotRequired[Union[int, None]]
    scope: "PruneScope"
    targets: dict[str, "Target"]
    units: NotRequired[bool]


class QuantEval(TypedDict):
    """A post-training quantization of the final model (int8 or int4 weights)."""

    bytes: int
    dense_bytes: int
    drop_points: float
    holdout_accuracy: float
    holdout_perplexity: NotRequired[Union[float, None]]
    kept: bool
    measure: NotRequired["Measure"]
    val_accuracy: float
    val_perplexity: NotRequired[Union[tuple[float, float], None]]


class QuantHoldout(TypedDict):
    """A quantized variant's holdout figures."""

    accuracy: float
    loss: float
    variant: "Quantize"


class QuantVerdict(TypedDict):
    """Whether a quantized variant is kept, and what it cost."""

    drop_points: float
    kept: bool
    measure: "Measure"
    variant: "Quantize"


class QuarantineEntry(TypedDict):
    """One line of `quarantine.jsonl`."""

    cause: "SpikeCause"
    ids: NotRequired[list[str]]
    left: NotRequired[list[int]]
    loss: float
    phase: "Phase"
    rows: list[int]
    step: int
    threshold: float


class RequestCheckPipelineFields(TypedDict):
    batch: int
    lr: float
    steps: int


class RequestCheckPipeline(TypedDict):
    """Overfit one batch of the fresh model's copy (dropout off) and evaluate the fresh model; answered by [`Observation::PipelineChecked`]."""

    CheckPipeline: "RequestCheckPipelineFields"


class RequestTrain(TypedDict):
    """One optimizer step; answered by [`Observation::Stepped`]."""

    Train: "StepPlan"


class RequestEvaluateFields(TypedDict):
    record: NotRequired[Union["Phase", None]]


class RequestEvaluate(TypedDict):
    """Evaluate on validation; answered by [`Observation::Evaluated`]."""

    Evaluate: "RequestEvaluateFields"


class RequestRestoreFields(TypedDict):
    scope: "RestoreScope"
    to: "RestorePoint"


class RequestRestore(TypedDict):
    """Restore a checkpoint; answered by [`Observation::Restored`]."""

    Restore: "RequestRestoreFields"


class RequestPrune(TypedDict):
    """Set the pruning masks of these weight matrices and apply them after every optimizer step from now on; answered by [`Observation::Pruned`]."""

    Prune: "PruneOrder"


class RequestMeasureSensitivityFields(TypedDict):
    heads: NotRequired[Union[int, None]]
    levels: list[float]
    linearized: NotRequired[bool]
    modules: list[str]
    samples: NotRequired[Union[int, None]]
    stop_above: NotRequired[Union[float, None]]
    units: NotRequired[bool]


class RequestMeasureSensitivity(TypedDict):
    """Prune each module alone, on a copy, to each level and evaluate; answered by [`Observation::Sensitivity`]."""

    MeasureSensitivity: "RequestMeasureSensitivityFields"


class RequestMeasureJointFields(TypedDict):
    heads: NotRequired[Union[int, None]]
    samples: NotRequired[Union[int, None]]
    sparsity: dict[str, float]
    units: NotRequired[bool]


class RequestMeasureJoint(TypedDict):
    """Prune all these modules at once, on a copy, and evaluate; answered by [`Observation::JointLoss`]."""

    MeasureJoint: "RequestMeasureJointFields"


class RequestQuantizeFields(TypedDict):
    block: NotRequired[Union[int, None]]
    to: "Quantize"


class RequestQuantize(TypedDict):
    """Quantize the final model's weights (one variant of `refine.quantize`) and evaluate it on validation; answered by [`Observation::Quantized`] (or [`Observation::Declined`])."""

    Quantize: "RequestQuantizeFields"


class RequestReadHoldoutFields(TypedDict):
    quantized: list["QuantVerdict"]


class RequestReadHoldout(TypedDict):
    """Read the holdout — once — and evaluate every exported model on it; keep each quantized model's files when its verdict says so; write the model card; answered by [`Observation::HoldoutRead`]."""

    ReadHoldout: "RequestReadHoldoutFields"


class RequestFinish(TypedDict):
    """The run is over: write `final/eval.json` from this summary."""

    Finish: "Summary"


class RequestFail(TypedDict):
    """The run cannot go on (the decision that says why was recorded)."""

    Fail: "Failure"


class RestorePointStep(TypedDict):
    """The checkpoint of this step."""

    Step: int


class RestorePointBefore(TypedDict):
    """The newest checkpoint of a step below this one that passes its sums (the newest there is when none is below): a spike rollback passes over the checkpoint of the step whose update gave the weights that spiked."""

    Before: int


class RunInfo(TypedDict):
    """What the conductor knows of the run before it starts."""

    classes: int
    gradient_checkpointing: NotRequired[Union[bool, None]]
    heads: NotRequired[Union[int, None]]
    job_steps: NotRequired[Union[int, None]]
    task: NotRequired["Task"]
    train_samples: int
    tuning: NotRequired[Union["Tuning", None]]
    weights: list[str]


class RunPlan(TypedDict):
    """What `plan.json` holds: the plan, and what the engine running it adds."""

    advice: list[str]
    checkpoint_every: int
    checkpoint_steps: list[int]
    contract_share: float
    eval_every: int
    gradient_checkpointing: NotRequired[bool]
    keep_last: int
    parameters: int
    phases: list["PhasePlan"]
    total_steps: int
    trained_phases: list["Phase"]


class Segment(TypedDict):
    """The current phase's span and LR."""

    lr0: float
    start: int
    steps: int


class SkippedBatch(TypedDict):
    """A batch that spiked, skipped when its step draws it again."""

    rows: list[int]
    step: int


class Spiked(TypedDict):
    """A spike the triage acted on."""

    cause: "SpikeCause"
    loss: float
    rows: list[int]
    step: int


class Stability(TypedDict):
    """What the main-phase stability rule remembers of its checkpoints."""

    best_val: NotRequired[Union[float, None]]
    improving_run: int
    prev_val: NotRequired[Union[float, None]]
    stabilised: bool
    stable_run: int


class StageEndedFields(TypedDict):
    restore_best: bool


class StageEnded(TypedDict):
    """The phase is over; the move to the next phase (and a rollback it asked for) is pending."""

    Ended: "StageEndedFields"


class State(TypedDict):
    """The conductor's state."""

    best: NotRequired[Union[tuple[int, float], None]]
    contraction: "Contraction"
    entered: list["Entered"]
    last_cut: NotRequired[Union[int, None]]
    lr: float
    lr_scale: float
    main_end: NotRequired[Union[tuple[int, "DecisionKind"], None]]
    nan_retries: int
    phase: "Phase"
    segment: "Segment"
    sparsity: dict[str, float]
    spike_window: NotRequired["Window"]
    stability: "Stability"
    stage: "Stage"
    step: int
    triage: NotRequired["Triage"]
    val_loss: NotRequired[Union[float, None]]
    version: int


class StepPlan(TypedDict):
    """One optimizer step's settings."""

    lr: float
    phase: "Phase"
    step: int


class Summary(TypedDict):
    """What the conductor knows at the end, for `final/eval.json`."""

    best: NotRequired[Union[tuple[int, float], None]]
    int4: NotRequired[Union["QuantEval", None]]
    int8: NotRequired[Union["QuantEval", None]]
    main_end: NotRequired[Union[tuple[int, str], None]]
    planned_steps: int
    step: int


class Target(TypedDict):
    """What pruning asks of one module: a sparsity, and the cap it may never pass."""

    cap: float
    sparsity: float


class Triage(TypedDict):
    """What spike triage remembers through rollbacks."""

    benign_noted: NotRequired[bool]
    left: NotRequired[list[int]]
    lr_factor: NotRequired[float]
    spikes: NotRequired[list["Spiked"]]
    suspects: NotRequired[list[int]]


class Turn(TypedDict):
    """The conductor's answer to an observation."""

    actions: list["Action"]
    request: "Request"


class Window(TypedDict):
    """The recent finite training losses, oldest first, with their batches' mean lengths."""

    points: list[tuple[float, Union[float, None]]]


Action = Union["ActionRecord", "ActionSetPhase", Literal["MergeAdapters"], "ActionSetBatch", "ActionScaleDropout", "ActionDropSamples", "ActionReplan", "ActionQuarantine", "ActionSkipBatches", "ActionCheckpoint"]

CheckpointCadence = Union[Literal["Never"], "CheckpointCadenceSteps"]

DecayShape = Union[Literal["cosine"], Literal["linear"], Literal["constant"], Literal["other"]]

DecisionKind = Union[Literal["validate_passed"], Literal["validate_failed"], Literal["checkpoint_round_trip"], Literal["plan_from_job"], Literal["lr_cut_plateau"], Literal["doctor_finding"], Literal["end_main_overfitting"], Literal["main_stable"], Literal["main_complete"], Literal["force_contract"], Literal["skip_contract"], Literal["rollback_nonfinite"], Literal["abort_nonfinite"], Literal["rollback_spike"], Literal["drop_spiking"], Literal["lr_cut_spike"], Literal["abort_spike"], Literal["benign_spike"], Literal["rollback_contract"], Literal["freeze_pruning"], Literal["drop_noisiest"], Literal["enter_contract"], Literal["enter_refine"], Literal["doctor"], Literal["sensitivity"], Literal["int8"], Literal["refuse_int8"], Literal["int4"], Literal["refuse_int4"], Literal["distill"], Literal["holdout"], Literal["engine_substitute"]]

FactsSource = Union[Literal["recipe"], Literal["hf"], Literal["lightning"]]

Failure = Union["FailureValidate", "FailureDiverged"]

LrShape = Union[Literal["warmup"], Literal["cosine"], Literal["linear"], Literal["constant"]]

Measure = Union[Literal["accuracy"], Literal["perplexity"]]

Observation = Union["ObservationPipelineChecked", "ObservationRoundTripped", "ObservationStepped", "ObservationEvaluated", "ObservationRestored", "ObservationPruned", "ObservationSampleLosses", "ObservationSensitivity", "ObservationJointLoss", "ObservationExported", "ObservationDistilled", "ObservationQuantized", "ObservationDeclined", "ObservationHoldoutRead"]

Phase = Union[Literal["validate"], Literal["main"], Literal["diagnose"], Literal["contract"], Literal["refine"]]

Precision = Union[Literal["fp32"], Literal["fp16"], Literal["bf16"]]

PreflightKind = Union[Literal["fp16_on_bf16_model"], Literal["bf16_not_native"], Literal["precision_not_applied"], Literal["checkpointing_without_input_grads"], Literal["reentrant_checkpointing_with_lora"], Literal["loss_not_normalised"], Literal["warmup_outside_range"], Literal["decay_not_cosine"], Literal["seed_article_failure"], Literal["effective_batch_outside_range"], Literal["sparse_checkpoints"], Literal["no_eval_split"], Literal["no_holdout"]]

PreflightSeverity = Union[Literal["warning"], Literal["error"]]

PruneScope = Union[Literal["module"], Literal["global"]]

Quantize = Union[Literal["int8"], Literal["int4"]]

Request = Union["RequestCheckPipeline", Literal["RoundTrip"], "RequestTrain", "RequestEvaluate", "RequestRestore", "RequestPrune", Literal["MeasureSampleLosses"], "RequestMeasureSensitivity", "RequestMeasureJoint", Literal["Export"], Literal["Distil"], "RequestQuantize", "RequestReadHoldout", "RequestFinish", "RequestFail"]

RestorePoint = Union[Literal["Latest"], "RestorePointStep", "RestorePointBefore"]

RestoreScope = Union[Literal["Weights"], Literal["Everything"]]

SpikeCause = Union[Literal["undetermined"], Literal["data"], Literal["optimisation"]]

Stage = Union[Literal["Training"], "StageEnded", Literal["Done"]]

Task = Union[Literal["classification"], Literal["language_model"]]

Tuning = Union[Literal["full"], Literal["lora"], Literal["peft"]]
