"""How far to trust a prediction: a model-error interval from the project's own validation residuals.

Every validation row (``validation/model_error.py`` gathers them) is one published measurement
predicted with nothing fitted on its own system, kept as ``ln(measured time / predicted time)``
with the facts that place it in a *regime*: which part of the model it tests (its *pool*), the
GPU's architecture, the model family and size, and the GPUs it ran on. A prediction's interval
is built from the rows of the regime it falls in:

* **Pools.** ``compute`` (one GPU's step from the presets and the roofline, leave-one-chip-out),
  ``ddp`` (a data-parallel step from a measured one-GPU step: buckets, NCCL, overlap) and
  ``layout`` (sharded and tensor x pipeline x data layouts of large transformers from presets:
  the Megatron-LM / DeepSpeed layout runs and the published large-model runs, FSDP / ZeRO / HSDP,
  3D and MoE, each table's rows tagged with their :attr:`ResidualRow.suite`).
  A preset prediction of a DDP job on several GPUs carries both the compute error and
  the communication/overlap error: its residuals are every sum of a ``compute`` and a ``ddp``
  residual (the errors of two independent parts add in log space). A prediction whose compute
  was measured (``--single-gpu-step-ms``, a calibration profile) carries only the ``ddp`` error;
  tensor/pipeline layouts, transformers of a billion parameters or more and, from the presets,
  sharded data parallelism (ZeRO, FSDP: :func:`regime_of`) take ``layout``.
* **Regime.** Within a pool the rows that share the query's values of the pool's regime keys
  (step pools: GPU architecture, model family, size band, scale band, the compute pool with
  the family first, the layout pool with the layout kind first, :data:`LAYOUT_KEYS`; collectives: the
  all-reduce's size band, then its fabric class); keys are dropped from the last until at least
  :data:`MIN_ROWS` rows remain (:data:`KNOBS`).
* **Interval: the shortest 80 % window, conformalised** (CQR: Romano, Patterson and Candes 2019,
  "Conformalized quantile regression", NeurIPS). Regimes differ in how well dpsim predicts them (a
  DDP step from a measured one-GPU step within 0.2 %, a small all-reduce within 20 %) and in their
  bias (the Megatron-LM layout rows all measure 3-30 % slower than predicted), so the interval
  starts from the regime's own residuals: the narrowest window holding ``ceil(0.8 n)`` of its
  ``n`` rows (:func:`_shortest_window`, their highest-density region; centre the median), centred
  where the regime's errors lie, as wide as most of them spread, and asymmetric where they are
  (the interval carries its two ends). Those windows come from few rows of a few systems, so they
  are then calibrated: each row gets the score ``max(lo - r, r - hi)`` against its regime's window
  taken without its own system and widened for each way the row extrapolates from the others (as a
  prediction on that system would build it), and both ends of every window move out by one margin,
  the ``ceil(0.8 (N + 1))``-th smallest of all pools' ``N`` scores together (inward when negative),
  which holds a new row exchangeable with them at least 80 % of the time (:func:`_margin`). Every
  quantile is an order statistic (:func:`_order_statistics`), never interpolated. (Where no
  pool has two systems the margin is 0.) The interval is still labelled p10-p90: it is the p10-p90 of the
  regime's rows mapped onto the window (:func:`_mapped`, which lets pools' errors add), an 80 %
  interval whose two tails need not hold 10 % each.
* **Chosen on the rows.** :data:`MIN_ROWS`, the step pools' keys and the collectives' are fixed by
  the reasons given where they are defined. The compute pool's key order and the order statistics
  were compared on the leave-one-system-out score below (each has a reason, given where it is
  defined, but was kept after seeing it). The band and margin rule (the shortest window with one
  margin for all pools, "X1J" in ``validation/model_error_variants.py``) was written down and
  scored after about 25 registered variants had been (interval2, interval3: below), as "reported
  only", then shipped by the lead (interval4, 2026-12-06): it is chosen by its figure, post hoc, so
  the 1.919 below is not out of sample. The evidence on how much the choice buys: choosing per
  left-out system, on the other 49 systems' rows alone, among the rule before it, X1 and X1J, and
  scoring that system's rows with the choice reads 80.9 %, 1.944 (X1J chosen for 49 of the 50;
  ``python validation/model_error_variants.py --nested W0 X1 X1J``); that check cannot measure that
  X1J itself was proposed after X1's figures were seen.
* **Measured, not assumed.** Leaving each system out, with the large-model rows at their own
  leave-one-system-out residuals (2026-12-08: the folds choose their efficiency by 0.005): 80.1 % of
  the 497 rows inside (398), median half-width 2.35x the median |error| (VALIDATION.md, "Model-error
  intervals", per regime; ``tests/test_model_error.py`` holds the whole >= 80 % and every pool >= 75 %;
  issue 25's width bar, <= 2, is a strict xfail there). Per pool (inside %, half-width / error):
  compute 90.0 %, 2.40; ddp 96.9 %, 37.4; layout 75.2 %, 2.24; collective 81.5 %, 1.76 (on 484 rows,
  2026-12-07, folds choosing by 0.05: 80.2 %, 2.46, layout 73.5 %; on 479 rows, before R215-R219
  tipped 26 large-model folds' efficiency from 0.95 to 0.90: 80.4 %, 2.18, layout 75.8 %).
  The one margin is
  calibrated over the pools together, not within each: the collectives are covered below their
  nominal 80 % because the compute and ddp rows are covered above it, which the margin per pool
  before avoided, and a DDP query from a measured one-GPU step takes a margin the layout and
  collective rows set. On the 423 rows it was chosen on (large-model rows at the fitted
  efficiency): 80.9 % (342), 1.919 (13.42 % / 6.99 %).
  Before interval4 (the regime's p10-p90 with a margin per pool): 80.9 %, 2.087 (compute 86.0 %,
  2.22; ddp 75.0 %, 20.41; layout 80.4 %, 1.74, by kind dp 81.6 %, 3d 77.5 %, moe 84.6 %;
  collective 80.9 %, 1.95). That rule's history: unchanged since
  the fifth session's 2.084: the seventh session's engines for R053 and R116 (Colossal-AI Gemini, MiCS; from 2.105) and the sixth session's model changes (DeepSpeed ZeRO-3's re-gathers, the
  Qwen3 routers' cited skew, packed-sample attention, H20 attention, the A100 power cap, the
  Nemotron-4 MLP) moved the residuals, and with them the rows' widths. On 2026-12-06 (fifth session) the
  layout rows came to be scored as the queries they would be, with their step's fabric class and
  exposed share ("Several pools"), and a layout query stopped adding the collective pool's error
  over a fabric some layout row crossed: from 80.4 %, 2.084 (layout 79.3 %) the four GCP A3
  (MaxText) rows, over GPUDirect-TCPX, which no other system's layout row crossed and no collective
  measurement validated, took the collective term and the widening (half-width 13.2 -> 19.7-29.5 %;
  R051 inside), and AWS p4d's EFA row its collective term. Nothing in the intervals changed
  on 2026-12-06 (fourth session): the move from 80.6 %, 2.004 (397 rows) came from 26 new layout rows
  (LLaMA-1 / Llama 2 GPU-hours, ms-swift, XTuner's Ulysses long-context runs) and from residuals
  that moved (R060's head on its empty last chunk, R113-R115 without recomputation once Megatron's
  activation count fits them, R118-R121's MTP, node-limited routing and ZB-H1 weight gradients).
  Nothing in the intervals changed
  on 2026-12-06 (third session): the move from 81.0 %, 2.08 (374 rows) came from 23 new layout rows
  (Nemotron-4, DeepSeek-V3/V2, GLM-130B, Wu et al.'s 50.6B, MegaScale's Megatron-LM baselines), which
  moved the layout pool from 80.7 %, 2.02 to 79.7 %, 1.60. Nothing in the intervals changed
  on 2026-12-06 (second session): the move from 80.7 %, 2.05 came from residuals (the A100 / V100
  DDP rows costed on their P2P-off servers, MaxText's bf16 residual stream, DeepEP's one send per
  destination GPU, fused weight-gradient accumulation on the MoE rows). Nothing in the intervals changed
  on 2026-12-06: the move from 80.6 %, 2.27 (372 rows) came from the layout rows' residuals
  (OLMo-core's rows restated from the commits that first published them, two September 1B rows
  added, their eager fp32 loss costed; Megatron's eager multihot conversion on R059/R061): the
  median half-width narrowed 14.7 -> 13.2 % with the median |error| at 6.5 -> 6.4 %; the layout
  pool's margin, and with it every layout row's width, follows the pool's scores, so a handful of
  rows moving can shift it this much (the closeness to the bar is that fragile, not a method
  change). Before that, these are after the framework costs
  read from source on 2026-12-05 moved the large-model residuals (llm-foundry's unpad copies and
  Composer's fp32 reduction: 80.6 %, 2.17; then InternLM's FlashAttention 1 and OLMo 2's QK-norm,
  which made the layout rows' errors smaller, 9.1 -> 6.7 %, faster than their intervals narrowed);
  with the kind key and before those: 80.4 %, 2.37 (layout 77.4 %, 2.08; dp 69.2 %, the
  MosaicML H100 rows 53 %). Before the layout pool was keyed by kind: 80.1 %, 2.43 (layout 76.7 %,
  1.99).
  The 107 published
  large-model runs joined the ``layout`` pool on 2026-12-05 (before, it held the 26 Megatron-LM /
  DeepSpeed rows, and 265 rows read 82.6 % at 2.07x; the intervals those rows gave held 78 of the
  107 large-model runs, 73 %, out of sample: a user's FSDP or MoE prediction was judged by
  Megatron's 3D runs). With them the layout pool reads 77.4 % at 2.05x (hopper rows 68.1 %: the
  MosaicML H100 runs are all slower than predicted, by up to 48 %, a bias no other system shows).
  Keyed by layout kind first (sharded / 3D / MoE), measured before the FSDP copies of the same
  day moved the large-model rows: 75.2-77.4 % at 1.95-2.30x in the pool, 79.6-80.4 % overall, by
  the keys after it.
  Three changes moved it from 82.3 % at 2.45x (265 rows): the margin scored on the widened intervals
  (80.0 %, 2.01, but the compute pool's ampere rows fell to 54 % inside, its margin now ~0 while
  its one-chip architectures, widened, held 100 %); the compute pool keyed by model family
  first (:data:`COMPUTE_KEYS`; 81.9 %, 2.20, every compute architecture with more than two rows
  >= 79 %); order statistics instead of interpolated quantiles (82.6 %, 2.07; the margin's
  alone 82.6 %, 2.26, the regimes' alone 82.3 %, 2.07; other interpolation rules 82.6 %,
  2.16-2.21). The median half-width is 13.5 % against 13.0 % for the bar: the rows next above
  it are six all-reduces of 32-256 MiB at 13.5 %, four of them outside their interval.
  Tried with them and not kept (inside %, half-width / error): the margin at the plain 80 %
  rank (81.5 %, 2.07; before the order statistics 80.4 %, 2.15; below 80 % without the family
  key: 78.1 %, 1.96); a scale model, the
  margin a multiple of the regime's p10-p90 half-width or median absolute deviation, per pool
  or for all (81.1-82.6 %, 2.23-2.30); a margin per extrapolated / not extrapolated row
  (Mondrian; 79.2 %, 2.01 without the family key); one-sided margins at p90 each (CQR's
  asymmetric form: 84.5 %, 2.87 before these changes); other key orders: collectives by fabric
  first (78.9 %, 2.58), by size band alone (80.4 %, 2.26), with the scale band (80.8-82.6 %,
  2.05-2.30) or the architecture (80.8 %, 2.13); layouts and DDP steps keyed by size or scale
  first (no change); regimes of 12 rows (78.5 %, 2.26) or 7 (80.4 %, 2.01). The errors are
  heavy-tailed across systems (a left-out platform's bias is not in the others' rows: an
  NVLink-bridge pair measured 2.1x its all-reduce prediction, MT-NLG 1.3x its step).
  Before (normalised split conformal: residual less the pool's median over the regime's median
  absolute deviation, three knobs per pool picked from a grid by coverage): 81.9 % at 2.98x with
  the knobs chosen on all rows, 80.0 % at 2.98x with them re-chosen without each left-out
  system. Also tried, each with the extrapolation widening (inside %, half-width / error): the
  regime's plain p10-p90 with the conformal rank but no calibration across systems (74.0 %,
  2.21; 75.8 %, 2.42 requiring two systems per regime); every system weighted equally with the
  rank counted in systems (Dunn, Wasserman and Ramdas 2022; 74.7 %, 3.50 with two systems per
  regime, 85.7 %, 4.33 with three); CQR from the regime's median, i.e. a regime-centred conformal
  interval (83.4 %, 3.50); from its p25-p75 (83.4 %, 2.77); with the margin a multiple of the
  regime's width (CQR-r, 83.4 %, 2.83); with 16 rows per regime (83.8 %, 3.09); two systems per
  regime (83.0 %, 2.66); calibrated within the first key's value (81.9 %, 2.80). Two read lower
  but rest on a choice with no reason behind it, made after seeing them: 5 rows per regime
  (81.1 %, 2.54) and 5 rows with calibration within the first key (82.3 %, 2.18); not shipped.
  The normalised method with each regime's median as centre read 83.0 % at 2.75x (knobs chosen
  on all rows).
* **A per-row error scale: tried on 2026-12-05, not kept** (normalised conformal prediction, the
  locally weighted form of Lei, G'Sell, Rinaldo, Tibshirani and Wasserman 2018, "Distribution-free
  predictive inference for regression", JASA, arXiv:1604.04173: the score is the residual over a
  scale of the row, the interval the centre +/- the margin times the query's scale). Here the
  scale was to be a property of the prediction itself, known before any measurement and never
  fitted: each row's residual divided by it, the regime's p10-p90 and the margin taken on those,
  and the query's own scale multiplying back. Each was registered with its reason before its score
  (inside %, half-width / error; all rows, then the pool):
  the ``ddp`` pool scaled by the share of the step the model predicts rather than measures (the
  step less the measured one-GPU step, plus the communication it hides, over the step: 0.4-1.7 %
  on the 32 rows): 80.6 %, 2.43 (ddp 87.5 %, 18.51, from 81.2 %, 21.64). Not kept, as registered
  before the score: the A100 and V100 rows have the smallest shares and the largest errors (3-13 %,
  which ``validation/accuracy_ddp.py`` finds are not communication), and a user's job over a slow
  network has a share of tens of % against the rows' 1.7 % at most, where the scaled A100 residual
  (ln 1.14 over 0.9 %, about 15) would put an end at e^4 times the prediction at a 27 % share. The ddp rows lie below both overall
  medians (0.2 % error, 4.8 % half-width against 6.9 % and 16.5 %), so no ddp interval moves the
  overall ratio (without the ddp rows it reads 2.24). Collectives: the share of the predicted
  all-reduce that is NCCL's size-independent latency (``CollectiveResult.latency_s`` over its
  time) runs from 0.001 above 256 MiB to 0.96 at 4 MiB and below, so alone it makes a large
  message's 3.5 % error a score ~20x a small one's; a scale ``(L/T) s_L + (B/T) s_B`` needs the
  ratio of the two parts' error spreads, which no cited measurement gives. The one form without
  it, independent parts of equal spread (``hypot(L/T, B/T)``, 0.71-1): 80.1 %, 2.43 (collective
  80.9 %, 1.99, from 1.95). Layouts: the share that is not compute (exposed communication and
  bubble) is under 0.4 % for half the sharded rows, whose errors are compute-efficiency errors, so
  it cannot be the scale without a floor no source gives; ``hypot(compute share, other share)``:
  80.1 %, 2.47 (layout 76.7 %, 2.04). What was kept instead is the layout kind as the layout
  pool's first key (:data:`LAYOUT_KEYS`; 80.1 %, 2.43 -> 80.4 %, 2.37, registered as a rerun of the
  measurement above); with the ``hypot`` scale too, 80.6 %, 2.28 (not kept: the scale alone
  widened). Measured once, not registered beforehand (the kind carried in the model-family key,
  which gave the same 80.4 %, 2.37 for the order kept), so not candidates: the kind, then size,
  scale, architecture (80.9 %, 2.21; with the scale 2.12); the kind, then scale, architecture,
  size (80.4 %, 2.12; with the scale 80.9 %, 2.11); the kind second (80.4 %, 2.32). Registered and
  not kept: the layout pool's margin calibrated within the query's kind (Mondrian), since one
  kind's errors are not evidence about another's: 80.9 %, 2.50 (layout 78.9 %, 2.27: the sharded
  kind's margin grew, its ampere rows to 93.9 % at 1.56, while the MosaicML H100 rows stayed at 56 %).
* **The ddp pool's 21.64x: a mechanistic key sought on 2026-12-05, none kept.** The 32 rows are a
  mixture of servers: 20 rows of four (two H100 hosts, H200, B200) within 0.51 % and 12 of two
  (A100 SXM4, V100) 2.5-14.4 % slower than predicted. At prediction time a hopper query keeps its
  architecture's 14 rows (about -0.1 to +0.2 %); left out, an H100 host leaves 8 (< :data:`MIN_ROWS`)
  and the B200 host none, so both are judged by the whole pool, whose p90 the A100 and V100 rows
  set. An interval narrow enough for 2x the pool's 0.2 % median error holds at most the 20 good rows
  (62.5 %). The candidates, checked against what the rows carry: the exposed communication share is
  0.01-0.05 % of the step on every row (it separates nothing; a query's exposed share already
  brings in the collective pool); every row is one transport class (intra-node NVLink: NVSwitch
  presets, the V100 cube mesh costed on ``nvlink``); the share the model predicts rather than
  measures (the step less the measured one-GPU step, over the step) is 0.38-1.43 %, and the A100
  rows, at 0.51-0.72 %, miss by 5-27x their whole modelled part, so "a step that is 99 % measured
  cannot be off by more than its modelled 1 %" does not hold here (the scale was tried above:
  87.5 %, 18.51). Registered before its score, but after seeing which rows miss: a key
  ``reference`` first in the ddp pool, the one-GPU and N-GPU runs in result folders naming the same
  host (Lambda's ``results_v2`` rows) or not (the ``results`` v1 rows), a query unstated unless its
  user says so: 80.4 %, 2.27 (ddp 78.1 %, 1.41: those rows 75.0 %, 1.73, the others 83.3 %, 1.46);
  with the margin calibrated within the key's value (Mondrian) the same (left out, the v1 value keeps
  one server, too few to calibrate within). Not kept: the mechanism it stood for, a one-GPU step
  measured on another machine, is not borne out. The v1 folders' file names (lambdal/deeplearning-
  benchmark ``pytorch/results/{,2x,4x,8x}A100_80GB_SXM4_v1/PyTorch_resnet50_AMP/``) time the 1-, 2-,
  4- and 8-GPU runs at 18:30, 19:22, 21:04 and 21:59 on 2022-11-19, the V100's
  (``LambdaCloud_{,2x,4x,8x}V100_16GB_v1``) at 02:36, 03:26, 04:07 and 04:43 on 2022-12-16: one
  session each, most likely one server. What the key separates is Lambda's older result set
  (PyTorch 1.13.0a0, ``2xA100_80GB_SXM4_v1/sys_pytorch.txt``), which a query cannot state and no
  source ties to a DDP cost. Nor can the ddp pool move the overall ratio: its widest interval (a
  half-width of 7.1 %) is below the overall median half-width (14.7 %), and with every ddp
  half-width set to 0 the ratio still reads 2.27.
* **Heteroscedastic widths from the query: sought on 2026-12-06 (fifth session), none kept.** Each
  feature is known before any measurement (read from the prediction or from what the row leaves
  unstated) and was registered with its reason before its score; the figures are over the 423 rows
  (inside %, half-width / error; then the layout pool's), measured against 80.4 %, 2.084 before the
  layout rows were scored as queries ("Measured, not assumed"). First whether the feature sorts the layout
  pool's errors at all (median |error|, p80 |error|, rows): the predicted share of the step that is
  exposed communication or pipeline bubble (``exposed_comm_s`` over the step plus the bubble
  fraction; the Megatron-LM / DeepSpeed rows' tensor-parallel exposure and bubble): under 1 %
  9.1 %, 18.2 % (70), 1-10 % 7.9 %, 20.1 % (40), 10 % and more 8.5 %, 16.9 % (74); the large-model
  rows by whether the row leaves an input to an assumption (the harness's per-row ``assumed``: micro-
  batch, accumulation, recomputation's cost; the system's own, the network, shown apart): all stated
  11.1 %, 20.1 % (61), some assumed 6.4 %, 17.5 % (86), the opposite of "more assumed, less known";
  by dpsim's own predicted MFU (a claim of a high share of peak might overreach): under 40 % 5.0 %,
  15.5 % (31), 40-55 % 11.0 %, 17.3 % (59), 55 % and more 7.8 %, 21.5 % (57). None rises with the
  feature; the layout pool's errors are the systems' biases (MosaicML's H100 runs +25-36 %, MT-NLG's
  +32-37 %, ms-swift's H20 -22 to -37 %), which no query feature names. As regime keys of the layout
  pool (each splits the kind's rows, whose shared bias is what makes its interval narrow): the share
  in three bands (< 1 %, 1-10 %, >= 10 %) after the kind 81.1 %, 2.48 (layout 81.0 %, 2.29), first
  81.6 %, 2.48 (82.1 %, 2.12); in two at 5 % after the kind 80.9 %, 2.36 (80.4 %, 2.14), first
  80.9 %, 2.40 (80.4 %, 2.10); stated / assumed after the kind 80.9 %, 2.48 (80.4 %, 2.26); the
  predicted MFU band after the kind 81.1 %, 2.41 (81.0 %, 2.01); each as the last key changes
  nothing (80.4 %, 2.084). Two knobs chosen by nested leave-one-system-out (for each left-out
  system, from a grid fixed before scoring, the value whose leave-one-system-out intervals over
  the *other* systems' rows hold >= 80 % at the smallest half-width / error, then that system's
  rows scored with it): :data:`WIDEN_PER_EXTRAPOLATION` from 1, 1.25, 1.5, 2, 3 (2 chosen for 35
  of the 50 systems): 79.7 %, 2.047 (compute 80.0 %, 2.24); :data:`MIN_ROWS` from 5, 7, 9, 12, 16
  (7 for 25, 9 for 24, 16 for 1): 79.7 %, 2.084. The widening alone, each value for every system (a
  sensitivity read, not a candidate): 1: 80.4 %, 2.085; 1.25: 80.4 %, 2.102; 2: 80.4 %, 2.047 (the
  margin, scored on the widened intervals, takes the factor back). A regime's residuals as one bias
  per system (each system's median, all systems weighted alike, as a new system is one draw of its
  bias) plus every row's deviation from its own system's median (their outer sum, for the band and
  the samples alike): 79.2 %, 2.27 (layout 78.3 %, 1.98; dp 72.4 %). The pool's margin calibrated apart for
  queries whose regime kept every key and those that dropped one (a query judged by rows unlike it
  in the dropped respects): 81.1 %, 2.16 (layout 81.0 %, 1.88; collective 80.9 %, 2.34); by the
  number of keys kept: 81.1 %, 2.41.
* **Quantile rules, prediction ranks, two-system regimes, asymmetric and CV+ margins: registered
  on 2026-12-06 (interval2), none kept.** Each with its reason and one keep rule (the first in the
  registered order to reach >= 80 % inside at a ratio <= 2 with every pool >= 75 % is kept) written
  and committed before its score (``validation/large_model_runs.md``, "Model-error intervals:
  quantile rules and margins registered before scoring"; ``validation/model_error_variants.py``
  scores them). Already in place, so not new: the signed p10/p90 per regime (asymmetric about the
  prediction), the ``ceil(0.8 (n + 1))`` margin, the fixed key-dropping fallback. Scored (inside %,
  half-width / error; then compute, ddp, layout, collective): the regime band by Hyndman and Fan's
  type 8 (1996, The American Statistician 50(4), median-unbiased), the margin still an order
  statistic: 79.9 %, 2.143 (84.0 % 2.00, 75.0 % 20.91, 79.3 % 2.13, 80.3 % 2.03); by type 7,
  reported only: 80.1 %, 2.211; type 8 for band and margin, reported only (the guarantee is for an
  order statistic): 80.1 %, 2.125; the band at the distribution-free ranks ``floor(0.1 (n + 1))``
  from each end: 78.7 %, 2.467 (collective 77.7 %); regimes kept to rows of two systems or more:
  80.6 %, 2.105 (12 rows' widths move, neither figure); CQR's asymmetric form, one margin per side
  at the 90 % rank (Romano et al. 2019, Theorem 2): 80.6 %, 2.328 (ddp 62.5 %); the 20 % shared
  between the sides as the pool's binding sides fall: 81.3 %, 2.405; ``MIN_ROWS`` 11, the fewest
  rows whose inverted-CDF p10 and p90 are not the extremes: 79.7 %, 2.122; the type-8 band with 7,
  the fewest whose type-8 ends fall inside: 79.9 %, 2.140. Scored after those, not registered
  beforehand: CQR's CV+ form over systems (Barber, Candes, Ramdas and Tibshirani 2021, Ann. Statist.
  49(1): each score added to the query's band built without the score's system): 81.8 %, 2.376.
  Registered as a consistency repair, same rule: the five layout rows whose queries add the
  collective pool's error or widen for an unvalidated fabric (:func:`_margin`) scored on those
  intervals: 80.6 %, 2.075 (layout margin 0.0244 -> 0.0235), not kept because it misses 2.0, and
  shipping it after seeing that it narrows would be choosing it by the figure; it is the candidate
  if the rule is relaxed for repairs. Why 2.0 is hard: for one error law centred on the prediction
  the ratio is p80 / p50 of |error| (Gaussian 1.90, Laplace 2.32); the rows read 2.44 (collective
  2.75), and a constant half-width per pool holding 80 % reads 78.3 %, 2.53, so the regimes buy
  2.53 -> 2.1 and the rest would need the left-out systems' biases, which the others' rows do not
  carry. The bar falls in a block of 35 layout rows at 13.8-14.5 % half-width that follow the
  layout margin: about 0.8 % of margin decides it either way.
* **Regime cells, shrinkage, calibration groups, bias-centred and shortest bands: registered on
  2026-12-06 (interval3), none kept; X1J, reported only there, shipped by interval4.** Same keep
  rule as interval2's, each written and committed before its score
  (``validation/large_model_runs.md``, "Model-error intervals: regime cells, shrinkage and
  calibration groups registered before scoring"; ``validation/model_error_variants.py`` W0-W5,
  W1+-W5+, X1, X1+; W0 and W0+ re-read the rule then shipped and V11 through the same code).
  Against 80.9 %, 2.087 (inside %, half-width / error): the regime's p10 / median / p90 shrunk toward
  its parent's by ``k / (k + 1)``, ``k`` its systems (partial pooling): 80.9 %, 2.170; the margin
  calibrated apart for bands of one or two systems and of three or more (Mondrian; a new system's
  bias falls between ``k`` others' extremes with probability ``(k - 1) / (k + 1)``): 78.7 %, 2.161;
  regimes kept to three systems or more: 79.7 %, 2.254; bias-centred symmetric bands (the median
  +/- the ``ceil(0.8 n)``-th ``|r - median|``): 79.9 %, 2.047; one margin for all pools: 80.1 %,
  2.075 (layout 78.8 %, collective 77.7 %); each with V11's repair the same or lower in coverage
  (V11 alone re-read: 80.6 %, 2.052). Registered after those: the band as the shortest window of
  ``ceil(0.8 n)`` of the regime's sorted rows (Hyndman 1996's highest-density region of the rows):
  80.1 % (339 of 423, the bar exactly), 2.026 (compute 82.0 %, ddp 78.1 %, layout 80.4 %,
  collective 79.6 %), the closest yet, not kept: its margins about double (layout 0.027 -> 0.047,
  collective 0.035 -> 0.073) and its median half-width (14.15 % against 13.97 % for the bar) sits in
  a block of 20 all-reduce rows at 14.06-14.12 %. Written down after X1's figures as reported only
  (not eligible), X1's bands with one margin for all pools (0.0364): 80.9 %, 1.920 (compute 88.0 %,
  ddp 93.8 %, layout 79.9 %, collective 77.1 %); chosen per left-out system among the shipped rule,
  X1 and it on the other systems' rows alone (nested), 80.9 %, 1.944. It meets issue 25's bars but
  was proposed after seeing how close X1 came, and it gives a DDP query from a measured one-GPU
  step the layout and collective pools' margin (a hopper ResNet-50 query: +/-1.7 % -> +/-3.9 %)
  and the collectives 77.1 % inside: left to the lead (``validation/large_model_runs.md``), who
  shipped it (interval4, "Chosen on the rows" above).
* **The large-model rows at their leave-one-system-out residuals; a margin per pool, small-sample
  bands and extrapolation groups: registered on 2026-12-07 (width), none kept.** Since the multi-GPU
  compute efficiency 0.95 (fitted on the large-model rows) shipped, those rows' residuals at the
  shipped default carried their own system's share of the fit; ``validation/model_error.py`` now
  takes each from ``accuracy_large_models.leave_one_system_out`` (the efficiency chosen without the
  row's system). With the rule above that moves 357 of 444 inside (80.4 %), 2.113 to 355 (79.95 %:
  the coverage bar fails too), 2.148 (14.66 % / 6.83 %). Registered with a reason each and one keep
  rule before scoring (``validation/model_error_variants.py``, Y0-Y6: eligible at >= 80 % inside,
  <= 2 and every pool >= 75 %; smallest ratio wins; shipped only if ``--nested`` also meets both),
  scored on those residuals (inside %, half-width / error; compute, ddp, layout, collective): Y0,
  the rule above, 80.0 %, 2.148 (92.0 %, 96.9 %, 76.1 %, 77.7 %); Y1, a margin per pool (a pool's
  scores are evidence about its own queries), 80.0 %, 2.263 (82.0 %, 78.1 %, 80.0 %, 79.6 %); Y2,
  one margin for queries that extrapolate and one for the others, 80.4 %, 2.262; Y3, per pool and
  so split, 80.6 %, 2.263; Y4, the band the shortest window of ``ceil(0.8 (n + 1))`` rows (the
  small-sample rank) with a margin per pool, 81.1 %, 2.163; Y5, that band with one margin, 80.2 %,
  2.029 (94.0 %, 93.8 %, 76.1 %, 78.3 %); Y6, Y1 with regimes of two systems or more, 80.0 %, 2.263
  (no regime changes); the rule before interval4 (W0) 80.6 %, 2.098. Registered after those, before
  their own scores: one margin per scale band over all pools (a job across nodes meets exposed
  communication, stragglers and topology that dpsim models more coarsely), with Y5's band (Z1)
  80.9 %, 2.149, with the shortest window (Z2) 80.2 %, 2.207. None meets both bars, so none is
  kept. What they show: a margin per pool *widens* (the one margin does not widen the light pools
  by the heavy ones' tails; it lends the layout and collective pools the compute and ddp pools'
  over-coverage); the compute rows' half-widths (15-24 %) all lie above the overall median and the ddp
  rows' (6-7 %) all below, so the median half-width is set inside the layout and collective pools,
  whose own ratios are 1.8-2.1 at 76-78 % inside: the left-out systems' biases (MosaicML's 47 layout
  rows, 18 of them within 1 % of the median half-width) are not in the other systems' rows.
  Chosen per left-out system on the other systems' rows alone between Y0 and Y5 (the closest),
  and that system's rows scored with the choice: 80.0 % (355), 2.056 (Y5 for 38 of 58 systems;
  ``python validation/model_error_variants.py --gather --nested Y0 Y5``): the choice held out meets
  neither bar; among all of Y0-Y6, 81.5 % (362), 2.207 (Y5 for 34 systems, Y4 for 16).
* **Query-time regime features: registered on 2026-12-07 (regime), none kept.** The width helper found
  the median half-width set by each left-out system's own bias; a feature the query knows might separate
  the steps dpsim prices coarsely from the ones it prices well. :func:`query_features` reads, from the
  prediction's own configuration, parameters gathered per unit or state offloaded (``sharded_state``),
  long context (``cp > 1`` or :data:`LONG_CONTEXT_TOKENS`), FP8 linears, recomputation, and ``coarse``
  (sharded, long context or MoE); every row and regime carries them, no shipped rule reads them.
  Registered and committed before any score (``validation/model_error_variants.py`` R0-R6; keep rule
  as width's), on the 457 rows (inside %, half-width / error): R0, the rule above, 79.9 %, 2.241;
  the margin calibrated apart by ``coarse`` (R1) 79.4 %, 2.201; ``coarse`` as the layout pool's second
  key (R2) 80.1 %, 2.238; both (R3) 80.5 %, 2.403; the margin apart by ``sharded_state`` (R4) 79.9 %,
  2.092; by ``long_context`` (R5) 79.6 %, 2.237; by ``fp8`` (R6) 79.6 %, 2.235. None meets both bars.
  R4 moves the margin as meant (ln 0.038 for the 367 other rows, 0.088 for the 90 sharded ones; the
  sharded rows 68.9 -> 76.7 % inside) but gains 7 sharded rows for 7 others lost at the narrower band's
  edge; the sharded rows still outside are left-out systems' (MosaicML, Ai2's OLMo-core H100, XTuner)
  whose biases the other sharded systems' scores do not reach (``validation/large_model_runs.md``,
  "query-time regime features").
* **Several pools.** A preset multi-GPU prediction adds the compute and ddp pools' residuals
  (each moved out by the margin) pairwise (the outer sum: the distribution of the sum of
  two independent errors). No published row predicts such a step end to end, so whether the sum
  over-widens is not measured. A step's exposed communication carries the ``collective`` pool's
  error in proportion to its share of the step, except in a ``layout`` query over a fabric class
  some ``layout`` row's step crossed: those rows are whole steps measured over their networks, so
  their residuals already hold it (until 2026-12-06 it was added there too, which validation never
  scored: built that way the layout rows' intervals held 85.9 % at 2.31x their median error, all
  rows 83.2 % at 2.59x; a layout row is now scored as the query it would be, with its step's
  fabric and exposed share: 80.6 %, 2.084 over all, layout 79.9 %, 1.73).
* **Extrapolation.** Each way the query leaves the validated ground widens both sides of the
  interval by :data:`WIDEN_PER_EXTRAPOLATION`, and is named: a GPU architecture, model family,
  model size or scale that no row of the pool has, or an intra-node fabric or network transport
  that no published collective measurement validated (``collective_classes`` of the rows file).

The interval is the *model's* error. Run-to-run variability (stragglers, noise) is a separate
interval, from :mod:`dpsim.variability`, and is labelled as such.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import field
from functools import cached_property, lru_cache
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from dpsim.frozen import frozen_dataclass
from dpsim.strategies.registry import UNIT_STRATEGIES
from dpsim.wording import a_an, span
from dpsim.workload.spec import AttentionOp, MatmulOp

ROWS_FILE = Path(__file__).with_name("model_error_rows.json")
"""The residuals, written by ``python validation/model_error.py --write``."""

POOLS = ("compute", "ddp", "layout")
"""What a residual row tests about a whole step (module docstring)."""

COLLECTIVE_POOL = "collective"
"""Published all-reduce times (>= 1 MiB), each predicted with the NCCL constants fitted on the
other platforms: the error of a step's exposed communication over its fabric."""

MESSAGE_BANDS = ((4 * 2**20, "<=4MiB"), (32 * 2**20, "4-32MiB"), (256 * 2**20, "32-256MiB"), (math.inf, ">256MiB"))
"""All-reduce size bands: (upper bound in bytes, label)."""

COVERAGE = 0.80
"""The interval's nominal coverage (p10-p90)."""

WIDEN_PER_EXTRAPOLATION = 1.5
"""Each side of the interval grows by this factor for each way the query extrapolates."""

LARGE_TRANSFORMER_PARAMS = 1e9
"""Transformers from this size on are judged on the ``layout`` pool (large-model runs)."""

SIZE_BANDS = ((1e9, "<1B"), (2e10, "1-20B"), (2e11, "20-200B"), (math.inf, ">=200B"))
"""Model size bands: (upper bound in parameters, label)."""

SCALE_BANDS = ((1, "1"), (8, "2-8"), (512, "9-512"), (math.inf, ">512"))
"""GPU-count bands: (upper bound, label)."""

REGIME_KEYS = ("gpu_arch", "model_family", "size_band", "scale_band")
"""Regime keys in the order they are kept: the last is dropped first."""

@frozen_dataclass
class Knobs:
    """The choices one pool's intervals depend on, fixed by the principles in :data:`KNOBS` (none is
    chosen by scoring candidates on the rows)."""

    keys: tuple[str, ...]
    """Regime keys in the order they are kept (the last is dropped first)."""
    min_rows: int
    """Fewest rows a regime keeps for its p10-p90 before a key is dropped."""


MIN_ROWS = 9
"""Fewest rows a regime keeps: the smallest ``n`` whose split-conformal 80 % rank
``ceil(0.9 (n + 1))`` is at most ``n`` (a p10-p90 at that rank exists among the rows), the rule the
interval's earlier, normalised form already started from. At 9 rows the p10-p90 band before
interval4 took the regime's two extremes (the 1st and 9th of 9; 11 rows, the fewest where it did
not, read 79.7 %, 2.122: module docstring, interval2's variants); the shortest window keeps 8 of 9."""

COLLECTIVE_KEYS = ("message_band", "fabric")
"""The collective pool's regime keys: the all-reduce's size band first (latency- and protocol-bound
small messages are predicted far less well than bandwidth-bound large ones: median |error| 20 %
below 4 MiB, 4 % above 256 MiB), then its fabric class."""

COMPUTE_KEYS = ("model_family", "gpu_arch", "size_band", "scale_band")
"""The compute pool's regime keys: the model family first. Its unit left out is the GPU chip, and
an architecture has at most two chips among the rows (GA100 and GA102; the others one each), so an
architecture-first regime leaves a new chip with one other chip's rows (whose bias is not the new
chip's: GA100 measured +5 %, GA102 -2 % in median) or with no row of its architecture at all; the
family (convolution kernels or GEMMs and attention, which the roofline prices differently) is shared
by every chip."""

LAYOUT_KEYS = ("layout_kind", *REGIME_KEYS)
"""The layout pool's regime keys: the layout kind first (:func:`layout_kind`; issue 25 names it).
The kinds' steps are priced by different parts of the model (a sharded data-parallel step by its
parameter gathers and gradient reduce-scatters hidden behind the layers, a tensor x pipeline step by
its per-layer tensor-parallel collectives and pipeline bubble, a mixture of experts by its
all-to-alls and the busiest expert's load), so an error one kind's mechanism makes is not evidence
about another's, and a query's kind is known before anything is measured; the keys after it as the
other step pools'."""

KNOBS = {**{pool: Knobs(keys=REGIME_KEYS, min_rows=MIN_ROWS) for pool in POOLS},
         "compute": Knobs(keys=COMPUTE_KEYS, min_rows=MIN_ROWS),
         "layout": Knobs(keys=LAYOUT_KEYS, min_rows=MIN_ROWS),
         COLLECTIVE_POOL: Knobs(keys=COLLECTIVE_KEYS, min_rows=MIN_ROWS)}
"""Each pool's :class:`Knobs`."""


SIZE_EXTRAPOLATION = 2.0
"""A model more than this factor larger or smaller than every row of its pool extrapolates."""

SCALE_EXTRAPOLATION = 2.0
"""A job on more than this factor more GPUs than every multi-GPU row of its pool extrapolates."""


class _Bands:
    """The size, scale and message bands of something with ``params``, ``gpus`` and
    ``message_bytes`` (a row or a query)."""

    params: float
    gpus: int
    message_bytes: float

    # Cached (in the instance's __dict__, which a frozen dataclass's fields, equality and hash
    # leave alone): a margin reads each row's bands once per other system's regime.
    @cached_property
    def message_band(self) -> str:
        return band(self.message_bytes, MESSAGE_BANDS)

    @cached_property
    def size_band(self) -> str:
        return band(self.params, SIZE_BANDS)

    @cached_property
    def scale_band(self) -> str:
        return band(self.gpus, SCALE_BANDS)

    @cached_property
    def coarse(self) -> bool:
        """A step priced by the parts dpsim models most coarsely (:func:`query_features`): parameters
        gathered per unit or state offloaded, long context, or a mixture of experts."""
        return bool(getattr(self, "sharded_state", False) or getattr(self, "long_context", False)
                    or getattr(self, "layout_kind", "") == "moe")


@frozen_dataclass
class ResidualRow(_Bands):
    """One validation row: a published measurement against its leave-one-system-out prediction."""

    id: str
    """Row id in its reference CSV (``T001``, ``D003``, ``N01``...)."""
    pool: str
    """What it tests (:data:`POOLS`)."""
    system: str
    """The unit left out together (a GPU chip, a server, a publication's cluster and software)."""
    log_ratio: float
    """``ln(measured step time / predicted step time)``: positive when dpsim is fast."""
    gpu_arch: str
    """GPU architecture (:data:`dpsim.hardware.ARCHITECTURES`)."""
    model_family: str
    """``cnn``, ``encoder``, ``decoder`` or ``unknown`` (:func:`model_family`)."""
    params: float
    """Model parameters."""
    gpus: int
    """GPUs of the run."""
    source: str
    """Where the measurement comes from (the reference CSV's citation, shortened)."""
    fabric: str = ""
    """A collective row's fabric class (``nvswitch``, ``ib``, ``tcp``...), or the class a ``layout``
    row's step crossed (:func:`step_fabric`, as a query's); empty for ``compute`` and ``ddp`` rows."""
    message_bytes: float = 0.0
    """A collective row's all-reduce size in bytes, or a ``layout`` row's typical all-reduce (a
    gradient bucket, as a query's); 0 for ``compute`` and ``ddp`` rows."""
    exposed_share: float = 0.0
    """A ``layout`` row's predicted exposed communication over its predicted step (as a query's);
    0 for the other pools."""
    suite: str = ""
    """The validation table the row comes from, where a pool gathers more than one (the ``layout``
    pool: ``layouts``, Megatron-LM / DeepSpeed tensor x pipeline x data runs; ``large-models``,
    published FSDP / ZeRO / HSDP, 3D and MoE runs); reported apart, pooled alike."""
    layout_kind: str = ""
    """A ``layout`` row's kind (:func:`layout_kind`); empty in the other pools."""
    sharded_state: bool = False
    """A ``layout`` row's query shards parameters per unit (ZeRO-3, FSDP) or offloads state to the host
    (:func:`query_features`); False in the other pools."""
    long_context: bool = False
    """A ``layout`` row's query runs context parallelism or samples of :data:`LONG_CONTEXT_TOKENS` or more."""
    fp8: bool = False
    """A ``layout`` row's query trains its linears in FP8 (``--fp8``)."""
    recompute: bool = False
    """A ``layout`` row's query recomputes activations (any ``--recompute`` mode)."""


@frozen_dataclass
class Regime(_Bands):
    """Where a prediction falls: what its residuals are drawn from."""

    pools: tuple[str, ...]
    """Pools whose errors add up in this prediction (``("compute", "ddp")``, ``("ddp",)``, ``("layout",)``...)."""
    gpu_arch: str
    """GPU architecture."""
    model_family: str
    """Model family (:func:`model_family`)."""
    params: float
    """Model parameters."""
    gpus: int
    """GPUs of the job."""
    fabric: str = ""
    """The fabric class the job's communication crosses: the network transport's across servers,
    else the intra-node fabric's; empty on one GPU."""
    exposed_share: float = 0.0
    """Exposed communication over the predicted step: the share of the step the collective pool's
    error applies to (the rest carries the step pools' error)."""
    unvalidated_fabric: tuple[str, ...] = ()
    """Intra-node fabrics and network transports the job uses that no published collective
    measurement validated (each widens the interval)."""
    message_bytes: float = 0.0
    """A typical all-reduce of the job's exposed communication (a gradient bucket), in bytes."""
    layout_kind: str = ""
    """The job's layout kind (:func:`layout_kind`), read by the ``layout`` pool."""
    sharded_state: bool = False
    """The job shards parameters per unit or offloads state (:func:`query_features`)."""
    long_context: bool = False
    """The job runs context parallelism or samples of :data:`LONG_CONTEXT_TOKENS` or more."""
    fp8: bool = False
    """The job trains its linears in FP8."""
    recompute: bool = False
    """The job recomputes activations."""


@frozen_dataclass
class ModelErrorInterval:
    """A p10-p90 interval of the measured step time, given the prediction and its regime."""

    predicted_s: float
    """The predicted step time."""
    low_s: float
    """Lower end of the 80 % interval (the p10 of the regime's rows mapped onto its shortest 80 %
    window and widened: the two tails together hold 20 %, not necessarily 10 % each)."""
    high_s: float
    """Upper end of the 80 % interval (as :attr:`low_s`)."""
    coverage: float = COVERAGE
    """Nominal coverage of the interval."""
    regime: dict = field(default_factory=dict)
    """The regime as matched: pools and the keys kept (dropped keys are absent)."""
    rows: tuple[str, ...] = ()
    """Ids of the validation rows that set the width."""
    widened_for: tuple[str, ...] = ()
    """Each way the query extrapolates beyond the validation rows (each widens the interval)."""

    def scaled(self, factor: float) -> ModelErrorInterval:
        """The same relative interval on a quantity ``factor`` times the step (time to train)."""
        return ModelErrorInterval(predicted_s=self.predicted_s * factor, low_s=self.low_s * factor,
                                  high_s=self.high_s * factor, coverage=self.coverage, regime=self.regime,
                                  rows=self.rows, widened_for=self.widened_for)

    def throughput_range(self, value: float) -> tuple[float, float]:
        """A throughput's interval: ``value`` is inversely proportional to the step time."""
        return value * self.predicted_s / self.high_s, value * self.predicted_s / self.low_s

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "model-error", "coverage": self.coverage, "low_s": self.low_s, "high_s": self.high_s,
                "regime": dict(self.regime), "rows": list(self.rows), "widened_for": list(self.widened_for)}


def band(value: float, bands: tuple[tuple[float, str], ...]) -> str:
    """The label of the first band whose upper bound is at least ``value``."""
    for upper, label in bands:
        if value <= upper:
            return label
    raise AssertionError(value)


LAYOUT_KINDS = ("dp", "3d", "moe")
"""Layout kinds (:func:`layout_kind`)."""


def layout_kind(model, *, tp: int, pp: int, cp: int) -> str:
    """``moe`` (a mixture-of-experts model, however laid out), ``3d`` (tensor, pipeline or context
    parallelism) or ``dp`` (data parallelism alone: DDP, FSDP, ZeRO, HSDP)."""
    if getattr(model, "moe", None) is not None:
        return "moe"
    return "3d" if max(tp, pp, cp) > 1 else "dp"


def model_family(model) -> str:
    """``cnn`` (convolutions), ``decoder`` (causal attention), ``encoder`` (other attention) or
    ``unknown`` (a model known only by its FLOPs), from a :class:`~dpsim.workload.spec.ModelSpec`'s ops."""
    ops = [op for layer in model.layers for op in layer.ops]
    if any(isinstance(op, AttentionOp) for op in ops):
        return "decoder" if any(isinstance(op, AttentionOp) and op.causal for op in ops) else "encoder"
    if any(isinstance(op, MatmulOp) and op.kind == "conv" for op in ops):
        return "cnn"
    return "unknown"


LONG_CONTEXT_TOKENS = 32768
"""Samples from this many tokens on are long context (attention's share of the step grows with the
sequence, and such runs use ring or all-to-all context exchanges, offload and packing)."""

FEATURES = ("sharded_state", "long_context", "fp8", "recompute")
"""The query-time features a row and a regime carry (:func:`query_features`)."""


def query_features(config, model) -> dict[str, bool]:
    """What a prediction's own configuration says about the parts of the model that price its step
    (each known before anything is measured): parameters gathered per unit (ZeRO-3, FSDP) or state
    offloaded to the host, long context (context parallelism or :data:`LONG_CONTEXT_TOKENS`-token
    samples), FP8 linears, activation recomputation. Read into every row and every regime, so that
    a regime rule may key or calibrate on them (``validation/model_error_variants.py``)."""
    par, ex = config.parallelism, config.execution
    return {"sharded_state": par.strategy in UNIT_STRATEGIES or ex.offload != "off",
            "long_context": par.cp > 1 or (getattr(model, "tokens_per_sample", None) or 0) >= LONG_CONTEXT_TOKENS,
            "fp8": ex.fp8 is not None,
            "recompute": ex.checkpointing.mode != "off"}


@lru_cache(maxsize=1)
def _rows_file(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def load_rows(path: Path | None = None) -> tuple[tuple[ResidualRow, ...], frozenset[str]]:
    """The shipped residual rows (``path``: other rows, :data:`ROWS_FILE` as read at the call, which
    ``validation/model_error_variants.py --rows`` points elsewhere) and the fabric classes published
    collectives validated."""
    data = _rows_file(ROWS_FILE if path is None else path)
    rows = tuple(ResidualRow(**r) for r in data["rows"])
    return rows, frozenset(data["collective_classes"])


def forget_loaded() -> None:
    """Drop the cached rows file, so that the next read sees it as rewritten."""
    for cached in (_rows_file, load_rows):
        cached.cache_clear()


def _select(rows: list[ResidualRow], regime, keys_in_order: tuple[str, ...],
            minimum: int) -> tuple[list[ResidualRow], dict]:
    """The rows of the regime, keys dropped from the last until ``minimum`` remain."""
    # Each row's keys read once and compared on ever shorter prefixes (the keys are strings:
    # a prefix of equal tuples is the rows whose every kept key is equal).
    target = tuple(getattr(regime, k) for k in keys_in_order)
    if len(keys_in_order) > 1:
        values = list(map(attrgetter(*keys_in_order), rows))
    else:  # attrgetter of one name answers the value, not a tuple of it
        values = [tuple(getattr(r, k) for k in keys_in_order) for r in rows]
    for keep in range(len(keys_in_order), -1, -1):
        prefix = target[:keep]
        chosen = [r for r, v in zip(rows, values) if v[:keep] == prefix]
        if len(chosen) >= minimum or keep == 0:
            return chosen, dict(zip(keys_in_order[:keep], prefix))
    raise AssertionError("unreachable")


_TAILS = ((1 - COVERAGE) / 2, (1 + COVERAGE) / 2)
"""The quantile levels of a p10-p90 interval."""


def _order_statistics(values, levels: tuple[float, ...]) -> np.ndarray:
    """The empirical quantiles of ``values`` at ``levels``: the ``ceil(level n)``-th smallest value,
    never a value interpolated between two (the conformal guarantee is stated for that order
    statistic, and the interval's ends are then residuals that were measured, moved by the margin)."""
    return np.quantile(values, levels, method="inverted_cdf")


def _shortest_window(values) -> tuple[float, float]:
    """The narrowest window of ``ceil(0.8 n)`` consecutive sorted ``values`` (its lowest and
    highest value; the first such window on ties): the shortest interval holding 80 % of them, their
    highest-density region in Hyndman's sense (R. J. Hyndman 1996, "Computing and graphing highest
    density regions", The American Statistician 50(2):120-126). Where one system's rows sit off to
    one side of a regime, an equal-tailed p10-p90 keeps a tail row on each side; this window drops
    the far side's, so a band of the same share of rows is narrower (and may be asymmetric)."""
    v = np.sort(np.asarray(values, dtype=float))
    width = math.ceil(COVERAGE * len(v))
    spans = v[width - 1:] - v[:len(v) - width + 1]
    start = int(np.argmin(spans))
    return float(v[start]), float(v[start + width - 1])


def _band(rows: list[ResidualRow], regime, knobs: Knobs) -> tuple[float, float, float]:
    """The regime's band of ``ln(measured / predicted)``: the lower end, median and upper end of the
    shortest window holding 80 % of the regime's rows (:func:`_shortest_window`; the median is in
    any such window, as more than half the rows are)."""
    chosen, _ = _select(rows, regime, knobs.keys, knobs.min_rows)
    values = [r.log_ratio for r in chosen]
    low, high = _shortest_window(values)
    return low, float(_order_statistics(values, (0.5,))[0]), high


@lru_cache(maxsize=4096)
def _scores(pool_rows: tuple[ResidualRow, ...], knobs: Knobs) -> tuple[float, ...]:
    """The conformal scores of one pool's rows: of each row, how far both ends of its interval as
    a prediction on its system would build it (its regime's band taken *without its own system*,
    widened about the median for each way the row extrapolates from the others) must move out to
    hold it. None when the pool has one system. The score takes the widening in: the guarantee
    holds for the interval the score is measured on, and scored on the bare band the margin came
    on top of the widening (a pool whose extrapolated rows were all inside their widened intervals
    was widened twice). Not yet for five layout rows (R049-R052, GCP A3 over TCPX; R116, AWS p4d
    over EFA): their queries (:func:`_scored`) also widen for a fabric no collective measurement
    validated or add the collective pool's error, which this closed-form score leaves out (interval2's
    V11 and interval3's W+ / X1+ variants score them so; module docstring)."""
    scores = []
    for others, extent, mine in _held_out(pool_rows):
        bands: dict[tuple, tuple[float, float, float]] = {}
        for r in mine:
            key = tuple(getattr(r, k) for k in knobs.keys)
            if key not in bands:
                bands[key] = _band(others, r, knobs)
            low, centre, high = bands[key]
            factor = WIDEN_PER_EXTRAPOLATION ** len(_extrapolations(others, r, r.pool, extent))
            # the margin m holds r when centre -/+ (the band's side + m) x factor reaches it
            scores.append(max((centre - r.log_ratio) / factor - (centre - low),
                              (r.log_ratio - centre) / factor - (high - centre)))
    return tuple(scores)


def _held_out(pool_rows) -> Iterator[tuple[list, _Extent, list]]:
    """Leaving each system out, system by system (first seen first): the other systems' rows, their
    extent (once per system, not per row) and the system's own rows; a system alone in its pool is skipped."""
    by_system: dict[str, list[ResidualRow]] = {}
    for r in pool_rows:
        by_system.setdefault(r.system, []).append(r)
    for system, mine in by_system.items():
        others = [r for r in pool_rows if r.system != system]
        if others:
            yield others, _Extent.of(others), mine


def _margin(rows, knobs: dict[str, Knobs]) -> float:
    """The conformal margin, one for all pools: the ``ceil(0.8 (N + 1))``-th smallest of every
    pool's ``N`` scores (:func:`_scores`, each pool's rows against their own regimes), which each
    pool's band widened by it on both sides holds a new row exchangeable with all of them at least
    80 % of the time (over the pools together, not within each: module docstring, "Measured, not
    assumed", for the pools' own figures). 0 when no pool has two systems."""
    scores: list[float] = []
    for pool in (*POOLS, COLLECTIVE_POOL):
        pool_rows = tuple(r for r in rows if r.pool == pool)
        if pool_rows:
            scores += _scores(pool_rows, knobs[pool])
    if not scores:
        return 0.0
    n = len(scores)
    return float(_order_statistics(scores, (min(1.0, COVERAGE * (n + 1) / n),))[0])


def _mapped(values: np.ndarray, low: float, centre: float, high: float) -> np.ndarray:
    """The regime's rows mapped piecewise-linearly from their own p10 / median / p90 onto the band
    ``low`` / ``centre`` / ``high`` (so that the p10-p90 of the mapped rows, and of their sums with
    another pool's, is the band), or ten points at the band's ends and centre where a side of the
    rows has no spread to map and the band's side has."""
    lo0, c0, hi0 = (float(x) for x in _order_statistics(values, (_TAILS[0], 0.5, _TAILS[1])))
    if not ((c0 > lo0 or centre == low) and (hi0 > c0 or high == centre)):
        return np.array([low] * 2 + [centre] * 6 + [high] * 2)
    below = (centre - low) / (c0 - lo0) if c0 > lo0 else 1.0
    above = (high - centre) / (hi0 - c0) if hi0 > c0 else 1.0
    return centre + np.where(values < c0, (values - c0) * below, (values - c0) * above)


@frozen_dataclass
class _Extent:
    """What :func:`_extrapolations` reads of a pool's rows (their architectures, families, layout
    kinds, size range and largest scale), gathered once for the many rows :func:`_margin` scores
    against the same others."""

    archs: frozenset[str]
    families: frozenset[str]
    kinds: frozenset[str]
    min_params: float
    max_params: float
    max_gpus: int

    @classmethod
    def of(cls, pool_rows) -> _Extent:
        sizes = [r.params for r in pool_rows]
        return cls(archs=frozenset(r.gpu_arch for r in pool_rows), families=frozenset(r.model_family for r in pool_rows),
                   kinds=frozenset(r.layout_kind for r in pool_rows), min_params=min(sizes), max_params=max(sizes),
                   max_gpus=max(r.gpus for r in pool_rows))


def _extrapolations(pool_rows: list[ResidualRow], regime: Regime | ResidualRow, pool: str,
                    extent: _Extent | None = None) -> list[str]:
    e = _Extent.of(pool_rows) if extent is None else extent
    out = []
    if pool != COLLECTIVE_POOL:
        if regime.gpu_arch not in e.archs:
            out.append(f"{pool}: no validation row on {a_an(regime.gpu_arch)} GPU")
        if regime.model_family not in e.families:
            out.append(f"{pool}: no validation row of {a_an(regime.model_family)} model")
        if pool == "layout" and regime.layout_kind not in e.kinds:
            out.append(f"{pool}: no validation row of {a_an(regime.layout_kind or 'data-parallel')} layout")
        if not e.min_params / SIZE_EXTRAPOLATION <= regime.params <= e.max_params * SIZE_EXTRAPOLATION:
            out.append(f"{pool}: model size {regime.params:.3g} outside the validated "
                       f"{span(e.min_params, e.max_params)}")
    if regime.gpus > 1 and e.max_gpus > 1 and regime.gpus > e.max_gpus * SCALE_EXTRAPOLATION:
        out.append(f"{pool}: {regime.gpus} GPUs beyond the validated {e.max_gpus}")
    return out


def _pool_samples(rows, regime: Regime, pool: str, knobs: dict[str, Knobs], matched: dict, ids: list,
                  widened: list) -> np.ndarray:
    """The pool's residuals as they would fall on this query: its regime's rows mapped onto the
    regime's band (:func:`_band`, :func:`_mapped`), each moved away from their median by the
    conformal margin (:func:`_margin`), so that their p10-p90 is the band widened by the margin on
    both sides (and several pools' errors can be added)."""
    pool_rows = tuple(r for r in rows if r.pool == pool)
    if not pool_rows:
        raise AssertionError(f"no residual rows in pool {pool!r}")
    chosen, keys = _select(list(pool_rows), regime, knobs[pool].keys, knobs[pool].min_rows)
    matched[pool] = keys
    widened += _extrapolations(list(pool_rows), regime, pool)
    ids += [r.id for r in chosen]
    values = np.array([r.log_ratio for r in chosen])
    low, high = _shortest_window(values)
    centre = float(_order_statistics(values, (0.5,))[0])
    samples = _mapped(values, low, centre, high)
    # a negative margin (the regimes' bands too wide) narrows, never past the median
    return centre + np.sign(samples - centre) * np.maximum(np.abs(samples - centre) + _margin(rows, knobs), 0.0)


def _expm1(values: np.ndarray) -> np.ndarray:
    """``expm1`` of each value, by the C library (see its use in :func:`log_interval`)."""
    return np.array([math.expm1(x) for x in values])


def log_interval(regime: Regime, rows: tuple[ResidualRow, ...] | list[ResidualRow] | None = None,
                 knobs: dict[str, Knobs] | None = None,
                 ) -> tuple[float, float, dict, tuple[str, ...], tuple[str, ...]]:
    """``(low, high, matched regime, row ids, extrapolations)`` of ``ln(measured / predicted)``.

    ``rows`` defaults to the shipped rows and ``knobs`` to :data:`KNOBS`; a test passes a subset
    to leave a system out, or other knobs to score them.
    """
    rows = load_rows()[0] if rows is None else rows
    knobs = KNOBS if knobs is None else knobs
    matched: dict[str, Any] = {"pools": list(regime.pools)}
    ids: list[str] = []
    widened: list[str] = [f"{name} not validated by a published collective measurement"
                          for name in regime.unvalidated_fabric]
    step = np.zeros(1)
    for pool in regime.pools:
        step = np.add.outer(step, _pool_samples(rows, regime, pool, knobs, matched, ids, widened)).ravel()
    share = regime.exposed_share if regime.fabric else 0.0
    if share > 0 and "layout" in regime.pools and regime.fabric in {r.fabric for r in rows if r.pool == "layout"}:
        # The layout rows are whole steps measured over their own networks: where one of them
        # crossed the query's fabric class, the layout residuals already hold the error of that
        # fabric's exposed communication, and adding the collective pool's would count it twice
        # (measured on 2026-12-06: the layout queries' intervals as predictions built them, with the
        # collective term, held 85.9 % of the layout rows at 2.31x their median error, 83.2 % at 2.59x
        # over all rows, while the scored intervals, without it, read 79.3 %, 1.73 and 80.4 %, 2.084).
        share = 0.0
    if share > 0:
        matched["pools"].append(COLLECTIVE_POOL)
        matched["exposed_share"] = round(share, 4)
        coll = _pool_samples(rows, regime, COLLECTIVE_POOL, knobs, matched, ids, widened)
        # measured = compute part x its error + exposed communication x its error
        # math's scalar functions, not numpy's: numpy picks SIMD log/expm1 kernels by the CPU it runs
        # on, whose last bits differ between machines (seen 2026-12-07: a golden interval end moved
        # 3.5536831749166495 -> ...504 on an AVX-512 host); the C library's are the same everywhere.
        mixed = np.add.outer((1 - share) * _expm1(step), share * _expm1(coll)).ravel()
        step = np.array([math.log(x + 1.0) for x in mixed])
    assert regime.pools or share > 0, "a regime needs a pool"
    # each pool's samples already carry its conformal margin: plain p10 and p90 of their sum
    low, center, high = _order_statistics(step, (_TAILS[0], 0.5, _TAILS[1]))
    factor = WIDEN_PER_EXTRAPOLATION ** len(widened)
    low, high = center - (center - low) * factor, center + (high - center) * factor
    return float(low), float(high), matched, tuple(ids), tuple(widened)


def interval(step_s: float, regime: Regime) -> ModelErrorInterval:
    """The model-error interval of a predicted step time ``step_s`` in ``regime``."""
    low, high, matched, ids, widened = log_interval(regime)
    return ModelErrorInterval(predicted_s=step_s, low_s=step_s * math.exp(low), high_s=step_s * math.exp(high),
                              regime=matched, rows=ids, widened_for=widened)


def fabric_class(interconnect: str) -> str:
    """The collective class (``validation/accuracy_collectives.py``'s ``CLASSES``) of a server's interconnect."""
    return {"nvswitch": "nvswitch", "nvlink-bridge": "nvlink-bridge", "xgmi": "xgmi"}.get(interconnect, interconnect)


def transport_class(transport) -> str:
    """The collective class of a network transport (:class:`~dpsim.topology.transport.TransportSpec`):
    its NCCL plugin family (``socket`` is the ``tcp`` class, IPoIB included); a verbs or EFA
    transport without GPUDirect RDMA stages through host memory, which no published row measured."""
    kind = {"socket": "tcp"}.get(transport.kind, transport.kind)
    if not transport.gpudirect and kind != "tcp":
        return f"{kind} (host-staged)"
    return kind


def step_fabric(topology, n_gpus: int) -> tuple[str, tuple[str, ...]]:
    """The fabric class a job of ``n_gpus`` on ``topology`` communicates over (the network
    transport's across servers, else the intra-node fabric's; empty on one GPU), and those of its
    fabrics that no published collective measurement validated, named."""
    _, classes = load_rows()
    unvalidated = []
    fabric = ""
    node = topology.spec.node
    if n_gpus > 1 and node.gpus_per_node > 1:
        fabric = fabric_class(node.interconnect)
        if fabric not in classes:
            unvalidated.append(f"intra-node fabric {fabric!r}")
    if topology.spec.fabric is not None and n_gpus > node.gpus_per_node:
        fabric = transport_class(topology.spec.fabric.transport)
        if fabric not in classes:
            unvalidated.append(f"network transport {fabric!r}")
    return fabric, tuple(unvalidated)


def regime_of(*, model, gpu, topology, n_gpus: int, measured_compute: bool, layout: bool,
              exposed_share: float, message_bytes: float = 0.0, kind: str = "dp", sharded: bool = False,
              features: dict[str, bool] | None = None) -> Regime:
    """The regime of a prediction (module docstring: which pools, and the keys within them);
    ``exposed_share``: the step's exposed communication over the step; ``message_bytes``: a
    typical all-reduce of it (a gradient bucket); ``kind``: its :func:`layout_kind`; ``sharded``:
    a data-parallel strategy that shards model state (ZeRO, FSDP), whatever the model's size, is
    judged by the ``layout`` pool, whose ``dp`` rows validated such steps down to 125M parameters
    (MosaicML's FSDP runs; the ``ddp`` pool's rows are DDP steps from a measured one-GPU step):
    until 2026-12-06 a preset FSDP / ZeRO query that is not a transformer of a billion parameters
    or more took the compute and ddp pools, which gave the eight such layout rows (MosaicML's
    125M-760M FSDP runs, SageMaker's 50.6B ZeRO-3 run of a model known by its FLOPs), built as their
    queries were, half-widths of 53-244 % (every one inside) against the layout pool's 13-19 %.
    ``features``: :func:`query_features` of the prediction's configuration, carried for a rule that
    keys or calibrates on them (the shipped rule reads none: regime's R variants, module docstring)."""
    family = model_family(model)
    params = float(model.param_count)
    big_transformer = family in ("decoder", "encoder") and params >= LARGE_TRANSFORMER_PARAMS
    if layout or ((big_transformer or sharded) and not measured_compute):
        pools: tuple[str, ...] = ("layout",)
    elif measured_compute:
        pools = ("ddp",)
    elif n_gpus > 1:
        pools = ("compute", "ddp")
    else:
        pools = ("compute",)
    fabric, unvalidated = step_fabric(topology, n_gpus)
    return Regime(pools=pools, gpu_arch=gpu.architecture or "cpu", model_family=family, params=params, gpus=n_gpus,
                  fabric=fabric, exposed_share=min(1.0, max(0.0, exposed_share)) if n_gpus > 1 else 0.0,
                  unvalidated_fabric=unvalidated, message_bytes=message_bytes, layout_kind=kind, **(features or {}))


REPORTED_KEYS = {**{pool: "gpu_arch" for pool in POOLS}, COLLECTIVE_POOL: "message_band"}
"""The key each pool's coverage is reported by in VALIDATION.md (fixed, whatever the regime keys)."""


@frozen_dataclass
class Coverage:
    """Leave-one-system-out coverage of the intervals over one pool's rows (or all)."""

    pool: str
    """Pool, or ``all``."""
    rows: int
    """Rows scored."""
    inside: int
    """Rows whose measured time fell inside the interval built without their system."""
    median_abs_error: float
    """Median |measured / predicted - 1| of the rows."""
    median_half_width: float
    """Median half-width of their intervals, relative to the prediction: (high - low) / 2."""

    @property
    def fraction(self) -> float:
        return self.inside / self.rows if self.rows else math.nan


_Scored = tuple[bool, float, float]
"""One row scored without its system: (inside, |measured / predicted - 1|, half-width)."""


def _scored(row: ResidualRow, others: list[ResidualRow], knobs: dict[str, Knobs]) -> _Scored:
    """``row``'s interval built from ``others`` as a prediction in its regime would build it (a
    collective row: a step that is all exposed communication over its fabric; a layout row: with
    its step's fabric and exposed share, the collective pool's error added where no other system's
    layout row crossed that fabric, widened where no collective measurement validated it)."""
    collective = row.pool == COLLECTIVE_POOL
    unvalidated = ()
    if row.pool == "layout" and row.fabric and row.fabric not in load_rows()[1]:
        unvalidated = (f"fabric {row.fabric!r}",)
    regime = Regime(pools=() if collective else (row.pool,), gpu_arch=row.gpu_arch,
                    model_family=row.model_family, params=row.params, gpus=row.gpus,
                    fabric=row.fabric, exposed_share=1.0 if collective else row.exposed_share,
                    unvalidated_fabric=unvalidated, message_bytes=row.message_bytes, layout_kind=row.layout_kind,
                    **{name: getattr(row, name) for name in FEATURES})
    low, high, _, _, _ = log_interval(regime, others, knobs)
    return low <= row.log_ratio <= high, abs(math.expm1(row.log_ratio)), (math.exp(high) - math.exp(low)) / 2


def _loso(rows: tuple[ResidualRow, ...], knobs: dict[str, Knobs]) -> list[_Scored]:
    return [_scored(row, [r for r in rows if r.system != row.system], knobs) for row in rows]


def _coverage(pool: str, items: list[_Scored]) -> Coverage:
    return Coverage(pool=pool, rows=len(items), inside=sum(i for i, _, _ in items),
                    median_abs_error=float(np.median([e for _, e, _ in items])),
                    median_half_width=float(np.median([w for _, _, w in items])))


def _per_pool(scored: dict[str, list[_Scored]]) -> dict[str, Coverage]:
    order = [p for p in (*POOLS, COLLECTIVE_POOL) if p in scored]
    out = {pool: _coverage(pool, scored[pool]) for pool in order}
    out["all"] = _coverage("all", [x for pool in order for x in scored[pool]])
    return out


def loso_coverage(rows: tuple[ResidualRow, ...] | None = None,
                  knobs: dict[str, Knobs] | None = None) -> dict[str, Coverage]:
    """Each row's interval built from the rows of every *other* system with the given (default:
    shipped) knobs, as a prediction in the row's own regime would build it; per pool and over all
    pools. Nothing is chosen on the rows, so this is also the coverage a new system should expect."""
    rows = load_rows()[0] if rows is None else rows
    knobs = KNOBS if knobs is None else knobs
    scored: dict[str, list[_Scored]] = {}
    for row, item in zip(rows, _loso(tuple(rows), knobs)):
        scored.setdefault(row.pool, []).append(item)
    return _per_pool(scored)


def coverage_by(label_of, rows: tuple[ResidualRow, ...] | None = None,
                knobs: dict[str, Knobs] | None = None) -> dict[str, Coverage]:
    """:func:`loso_coverage` over the groups ``label_of(row)`` names (rows it labels ``None`` left
    out of the count, never out of the intervals), sorted by label."""
    rows = load_rows()[0] if rows is None else rows
    knobs = KNOBS if knobs is None else knobs
    scored: dict[str, list[_Scored]] = {}
    for row, item in zip(rows, _loso(tuple(rows), knobs)):
        label = label_of(row)
        if label is not None:
            scored.setdefault(label, []).append(item)
    return {label: _coverage(label, scored[label]) for label in sorted(scored)}


def regime_coverage(rows: tuple[ResidualRow, ...] | None = None,
                    knobs: dict[str, Knobs] | None = None) -> dict[str, Coverage]:
    """:func:`loso_coverage` per regime: each pool split by :data:`REPORTED_KEYS` (the GPU
    architecture of a step, the size band of an all-reduce), labelled ``pool key=value``."""
    return coverage_by(lambda r: f"{r.pool} {REPORTED_KEYS[r.pool]}={getattr(r, REPORTED_KEYS[r.pool])}", rows, knobs)
