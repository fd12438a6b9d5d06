"""Scheduling under uncertainty: time-sharing policies reading learned throughputs vs the table.

Settings (issue 20):

* ``gavel-2.0``, ``gavel-2.6``: Gavel's continuous multi-GPU jobs (scale factors from the Philly
  mix) at 2.0 / 2.6 jobs/h on 36 V100 + 36 P100 + 36 K80, 360 s rounds; the jobs of ``--window``
  are measured (Gavel: 4000-4999) and the run ends when they finish.
* ``shockwave``: Shockwave's 120-job trace (dynamic batch sizes) on 32 V100, 120 s rounds.

Sources, per policy (``--policies``, ``--shockwave-policies``):

* ``table``: the measured table the jobs run at (the oracle, the upper bound; the ``oracle``
  learner through the estimation stage gives the same runs, pinned by the tests);
* ``agnostic``: no estimation: the policy's heterogeneity-agnostic variant (max-min fairness ->
  Gavel's LAS, FTF -> FTF with every type at the V100 rate); for a policy without one (max sum
  throughput, min total duration) the ``uniform`` learner (every cell at Gavel's default 1
  steps/s, nothing packed);
* every other name of :data:`bayes_sched.estimation.learners.LEARNERS` (``per_cell``: independent
  log-normal posteriors deciding on Thompson draws; the learners of the ``learn`` branch once
  merged), each learning from the jobs' noisy reports (``--noise``, log-scale sd).

Per run: average JCT (h), makespan (h, first submission to last completion of the measured jobs),
worst finish-time fairness rho and the unfair fraction (rho > 1.05) of the measured jobs,
exploration GPU-hours: ``profiling_gpu_h`` (rounds in the cells a learner had a new job profiled
in) and ``new_cell_gpu_h`` (rounds in cells no job had reported from before: where a policy
deciding on posterior draws explores; every run visits new cells, so compare it with the
``oracle`` source's, which runs exactly as the table; NaN for the table, which has no estimation
stage), decision time per round with the estimation stage included (ms). Then per source
its ratio to the table over the seeds (mean and range, min..max), and its decision time over the
table run's.

    python experiments/bench_uncertainty.py [--settings gavel-2.0 gavel-2.6 shockwave]
        [--window 0 100] [--seeds 0 1 2] [--sources table agnostic per_cell]
        [--policies max_min_fairness_perf] [--shockwave-policies max_sum_throughput_perf]
        [--noise 0.05] [--max-hours 2000] [--cpu-time]
        [--exploration thompson|value_of_information|none] [--refit-growth F] [--json]

``--cpu-time``: the decision and estimation times are this process's CPU seconds
(``time.process_time``) instead of wall seconds: on a shared machine wall time counts the other
processes' work, CPU time only ours (torch and BLAS run on one thread in these runs).

Runs are sequential; wall time grows with the window (Gavel's full window, 4000-4999, took 5-55
min per run on this 2-core machine under load, before learning).

Measured (seeds 0 1 2, noise 0.05; ratio to the table: mean (min..max) over seeds; a 2-core
machine shared with other work, load average 15-21, so decision-time ratios are noisy):

    setting (jobs measured)   policy          source    avg JCT              worst FTF            decision
    gavel-2.0 (0-99)          max_min_f._perf per_cell  1.024 (1.015..1.040) 1.204 (1.031..1.389) 1.04
                                              agnostic  1.473 (1.451..1.503) 0.677 (0.608..0.781) 0.91
    gavel-2.6 (0-99)          max_min_f._perf per_cell  1.026 (1.010..1.046) 1.036 (0.902..1.152) 1.13
                                              agnostic  1.438 (1.379..1.483) 0.830 (0.789..0.855) 1.01
    shockwave (all 120)       max_sum_t._perf per_cell  1.046 (1.027..1.064) 1.026 (1.020..1.030) 1.19
                                              uniform   0.935 (0.935..0.935) 0.700 (0.700..0.700) 0.97
    shockwave (all 120)       min_total_dur.  per_cell, oracle, uniform: 1.000 (identical runs)
    gavel-2.0 (0-29)          ftf_perf        per_cell  1.004 (0.982..1.037) 1.008 (0.961..1.033) 1.20
                                              agnostic  1.442 (1.370..1.505) 0.592 (0.465..0.733) 1.12
    gavel-2.0 (0-29)          max_min_f._pack per_cell  1.320 (1.248..1.433) 0.847 (0.785..0.934) 2.24
                                              oracle    1.000 (identical)    1.000                1.17
                                              agnostic  1.484 (1.441..1.540) 0.508 (0.426..0.610) 0.70

The per-cell learner (no pooling, Thompson draws) stays 2-5 % above the oracle in average JCT,
with 51-81 GPU-hours of rounds in cells no job had reported from (jobs 0-99: 57 at 2.0 jobs/h, 74
at 2.6); the heterogeneity-agnostic policy is 44-47 % above it. On Shockwave's one-type trace
the rates matter only to max sum throughput, whose objective (steps/s summed over jobs of
different models) the uniform belief serves better than the true rates; min total duration runs
identically under every source. With space sharing the independent learner is 32 % above the
oracle: every unknown pair starts at the broad prior, so its draws pack pairs that turn out slow
(203 GPU-hours in new cells against the oracle's 52) and its decisions took 2.2x the table's with
a refit rebuilding every cell's posterior (13 ms a fit); refits are incremental since: rerun on
seed 0 at load 4-6, the same JCTs, 0.35 ms a fit, 22.5 ms a round against the table's 12.6 (1.78x;
more allocation recomputes, as every refit asks for one). These windows are the first 30 or 100
jobs (warm-up), not Gavel's steady-state 4000-4999.

Session 10 (issue 20, branch unc20): jobs 0-9, seeds 0 1 2 (the packed rows: seed 0), load
average 18-48 on 2 cores, so absolute milliseconds are up to ~20x an idle machine's; ratio to
the table run of the same seed, mean (min..max); "before" is the start of the session
(1912330) run beside it, with identical JCTs on every seed:

    setting    policy           source    avg JCT              worst FTF   decision vs table
    gavel-2.0  max_min_f._perf  bayes     0.995 (0.993..0.998) 0.892       2.23x (before 10.73x)
                                gavel     0.993 (0.989..0.996) 0.856       0.89x (before 3.58x)
                                sia       0.993 (0.990..0.997) 0.880       0.83x (before 3.39x)
                                agnostic  1.660 (1.576..1.759) 0.578       0.87x
    gavel-2.6  max_min_f._perf  bayes     0.990 (0.988..0.992) 0.771       2.19x
                                gavel     0.987 (0.984..0.989) 0.752       0.78x
                                sia       0.989 (0.984..0.992) 0.793       0.81x
                                agnostic  1.646 (1.537..1.753) 0.534       0.96x
    gavel-2.0  max_min_f._pack  bayes     1.054 (seed 0)       0.724       3.74x (fits learned)
                                bayes     1.116                0.838       3.86x (fits: table)
                                gavel     1.022                0.692       7.89x (fits: table)
                                sia       0.991                0.675       1.07x (fits: table)
                                per_cell  1.324                0.807       1.43x (fits: table)
                                agnostic  1.640                0.387       0.55x
               (fits learned, at eba5526, another run, load ~13: table 4.1 ms a round;
               bayes 1.054, 2.54x, 1.4 GPU-h of failed launches; gavel 1.487, 39x, 1,474
               GPU-h of failed launches: its plan profiles each new job beside reference types
               in pairs that do not fit, one unknown cell at a time; sia 0.990)
    gavel-2.0  sia              bayes     1.006 (1.005..1.007) 1.154       2.78x (refit a round)
                                sia       1.005 (1.005..1.006) 1.139       1.46x

Session 11 (issue 20, branch dec20), decision time in CPU seconds (``--cpu-time``; the same
harness on the start commit b62cc48 run back to back), max_min_fairness_perf, jobs 0-9, seeds
0 1 2; ours over the table, mean (min..max):

    gavel-2.0  before 2.79x (2.60..2.92)  after 1.94x (1.90..2.00)  load 22-24  (at f24df6a)
               after, final commit        2.13x (2.07..2.26)         load 6.5-8.5
    gavel-2.6  before 2.74x (2.26..3.00)  after 1.86x (1.80..1.90)  load 20-25
    average JCT identical to the start on 4 of 6 (setting, seed); gavel-2.6 seed 1 +0.015 %,
    gavel-2.0 seed 1 -0.02 % (posteriors equal to 1e-11: a rounding-level flip of a decision)

Jobs 0-29 (wall-clock decision columns, load ~20; ratio to the table, mean (min..max)):

    setting    source    avg JCT              worst FTF (absolute, seeds 0 1 2)
    gavel-2.0  bayes     0.994 (0.994..0.995) 0.648 0.934 0.658   (table 0.870 1.242 0.693)
               gavel     0.993 (0.992..0.995) 0.648 0.868 0.658
               sia       0.994 (0.993..0.995) 0.648 0.868 0.658
               agnostic  1.494 (1.450..1.544) 0.370 0.649 0.497
    gavel-2.6  bayes     0.992 (0.990..0.993) 0.502 0.674 0.489   (table 0.783 0.841 0.500)
               gavel     0.990 (0.986..0.993) 0.502 0.674 0.489
               sia       0.992 (0.990..0.994) 0.502 0.674 0.489
               agnostic  1.477 (1.428..1.511) 0.322 0.447 0.427

Session 12 (issue 20, branch voi20): ``max_min_fairness_packed`` with a learner decides on the
posterior mean and tries an unknown cell for one profiling round only where its value of
information beats the trial's cost (``exploration="value_of_information"``, the policy's
default since; ``--exploration thompson`` gives the old rule; the point learners, Sia's and
Gavel's, decide alike under both). gavel-2.0, jobs 0-9, seeds 0 1 2, load 14-21; ratio to the
table, mean (min..max); decision time in CPU seconds (``--cpu-time``, a run of table and ours):

    source                      avg JCT              worst FTF            decision vs table
    ours, value of information  0.996 (0.990..0.999) 0.899 (0.724..1.026) 6.5x (6.4..6.8)
    ours, Thompson (52dee37)    1.007 (0.999..1.015) 0.908 (0.735..1.051) 5.8x (5.5..6.0)
    ours, posterior mean only   0.994 (0.984..1.000)  (exploration="thompson", acquisition="mean")
    sia                         0.990 (0.982..0.997) 0.905 (0.675..1.091)
    gavel                       1.005 (0.993..1.022) 0.871 (0.692..1.017)
    agnostic                    1.645 (1.552..1.745) 0.582 (0.387..0.835)

Jobs 0-29, the same setting (load 15-17): ours (value of information) 0.998 (0.995..1.000),
worst FTF 0.644 / 0.952 / 0.805; Sia 0.996 (0.992..0.999), 0.707 / 0.952 / 0.715 (table 0.865
/ 1.325 / 0.830).

Session 12 (issue 20, branch dec20d), decision time in CPU seconds (``--cpu-time``, now the loop's
``clock``), max_min_fairness_perf, jobs 0-9, ours over the table, per seed 0 1 2; the start
commit 52dee37 and the branch run back to back at load 15-17 on 2 cores; every decision (the
allocation and pairs of every round) and every JCT identical to the start's on both settings,
3 seeds, perf and packed:

    gavel-2.0  start 1.592 2.273 2.062 (mean 1.976)   branch 1.784 1.981 1.704 (mean 1.823)
    gavel-2.6  start 2.172 1.978 1.889 (mean 2.013)   branch 2.090 2.011 1.706 (mean 1.936)

At this load one run's ratio moves by +-0.3 between repeats (the start alone read 1.59..2.27), so
per seed the two are not told apart; interleaved runs (table, ours, table, ours; ratio of the
minima; start and branch side by side) gave 2.03 1.79 1.65 / 2.12 1.91 2.03 for the start and
1.88 1.77 1.94 / 2.10 1.66 1.96 for the branch (gavel-2.0 / gavel-2.6). Two more back-to-back
pairs with the final branch (54c0864), per seed 0 1 2:

    load 13-10  gavel-2.0  start 2.043 1.763 2.082 (1.963)  branch 1.813 1.850 1.660 (1.774)
                gavel-2.6  start 2.062 1.914 2.190 (2.055)  branch 1.602 1.829 1.843 (1.758)
    load 7      gavel-2.0  start 1.895 2.386 1.761 (2.014)  branch 1.957 2.127 1.676 (1.920)
                gavel-2.6  start 2.187 1.840 2.215 (2.081)  branch 2.122 2.007 2.138 (2.089)

Over the three pairs: the start 1.98 (gavel-2.0) and 2.05 (gavel-2.6), the branch 1.84 and 1.93;
single seeds still read up to 2.14. What is left is mostly LAPACK at p ~230 effects (a Cholesky
per fit, L^-1 phi^T per prediction, the plan's 512 draws), which an unchanged posterior keeps.

Session 12 (issue 20, branch pdec20), ``max_min_fairness_packed`` with its default exploration
(value of information), gavel-2.0, jobs 0-9, decision time in CPU seconds (``--cpu-time``), ours
over the table per seed 0 1 2; the start 1be4da3 and the branch run back to back, twice (the
second pair in the other order); every round's allocation (a digest of each decision) and every
JCT identical to the start's on the 3 seeds (and on seed 0 with ``--exploration thompson``):

    load 6.6-7.4  start  6.479 5.356 6.286 (mean 6.04)  branch 4.749 5.062 4.958 (mean 4.92)
    load 4.3-4.5  start  5.981 6.116 6.282 (mean 6.13)  branch 5.140 4.954 4.709 (mean 4.93)
    Thompson, load 1.8-3.2 (avg JCT, worst FTF, makespan identical on the 3 seeds):
                  start  5.582 4.479 5.370 (mean 5.14)  branch 3.680 4.149 4.550 (mean 4.13)

Ours per round 10.2-13.0 ms at the start, 7.7-9.7 ms on the branch; the table 1.6-2.4 ms. Where
ours' goes (seed 0, CPU seconds over the run's 1270 rounds, load 5): refits 1.6; per allocation
(212) the mean rates of every class and pair cell 2.5, the value-of-information pass 3.3 (2.0 of
it HiGHS: the prices, and a re-solve per column that might pay), the packed LP 0.8; per round
1.9 (0.6 of it asking the estimator whether each job pair may fit). The table's decisions take
2.1 (its LP 0.7, per round 1.4). The refits, the rule's HiGHS solves and the table's own work
alone are 5.7 s, 2.7x the table's: this policy's 2x is out of reach while it refits and
re-prices at every allocation (Thompson's draws skip the HiGHS solves, not the refits and
predictions).

Session 13 (issue 20): Gavel's own window, jobs 4000-4999, ``max_min_fairness_perf``, seeds 0 1 2,
``--window 4000 5000 --seeds S --settings gavel-R --policies max_min_fairness_perf --sources SRC
--cpu-time --json``, one process per (rate, seed, source) at load 12-27 (ours on 62e8ba9; Gavel's,
Sia's and agnostic on e9f933a, whose changes do not touch them); ratio to the table (oracle) of
the same seed, mean (min..max); agnostic at 2.6 jobs/h not run (session 12's 1500-1599 window:
1.464):

    rate  source    avg JCT              makespan  worst FTF            decision (separate runs)
    2.0   ours      0.994 (0.993..0.995) 0.998     0.943 (0.741..1.045) 2.01 (1.99..2.02)
          Gavel's   0.993 (0.993..0.995) 0.998     0.882 (0.709..1.035) 1.38
          Sia's     0.996 (0.995..0.997) 0.998     0.969 (0.794..1.065) 1.37
          agnostic  1.322 (1.305..1.339) 1.000     0.949 (0.685..1.131) 1.12
    2.6   ours      0.995 (0.965..1.011) 1.020     1.253 (0.939..1.789) 1.83 (1.79..1.91)
          Gavel's   0.994 (0.964..1.010) 1.023     1.359 (0.939..2.107) 1.23
          Sia's     1.005 (0.998..1.020) 1.019     1.442 (1.033..1.871) 1.20

No unfair-fraction difference above 0.001. The oracle's worst FTF is 0.08-0.16 at 2.0 jobs/h and
0.30-1.59 at 2.6, so ratios of it swing widely; at 2.6 seed 2 ours' is 0.53 (Gavel's 0.62, Sia's
0.55). The learners' avg JCTs straddle the oracle's by up to 3.5% at 2.6 jobs/h (seed 1: ours
0.965, Gavel's 0.964): max-min fairness does not minimise JCT, so a belief that is off can move
it either way. On e9f933a (fixed priors, dec20u's and dec20p's speed-ups), table and ours in one
process per seed (``--sources table bayes``) at 2.0 jobs/h, load 4-7: ours' avg JCT 0.9955 /
0.9943 / 0.9935 of the table's, decision time 1.84 / 2.29 / 2.17 (mean 2.10) of the table's; at
2.6 jobs/h seeds 0 / 1 (seed 2 not run): avg JCT 1.005 / 0.966 (1.011 / 0.965 on 62e8ba9),
decision time 1.67 / 1.83.

Session 14 (issue 20), the landed code (ae3a1a2), Gavel's window 4000-4999,
``max_min_fairness_perf``, one process per (rate, seed) with every source (``--sources table
bayes gavel sia agnostic --cpu-time --json``), two processes at a time on 2 cores (load ~2); ratio
to the table of the same process, mean (min..max) over seeds 0 1 2:

    rate  source    avg JCT              makespan  worst FTF             decision
    2.0   ours      0.994 (0.994..0.996) 0.997     0.936 (0.736..1.045)  1.85 (1.80..1.91)
          Gavel's   0.993 (0.993..0.995) 0.998     0.882 (0.709..1.035)  1.30
          Sia's     0.996 (0.995..0.997) 0.998     0.969 (0.794..1.065)  1.31
          agnostic  1.322 (1.305..1.339) 1.000     0.949 (0.685..1.131)  1.07
    2.6   ours      0.993 (0.966..1.007) 1.022     1.251 (0.925..1.799)  1.95 (1.77..2.26)
          Gavel's   0.994 (0.964..1.010) 1.023     1.359 (0.939..2.107)  1.46
          Sia's     1.005 (0.998..1.020) 1.019     1.442 (1.033..1.871)  1.41
          agnostic  1.744 (1.678..1.857) 1.357     12.2 (5.1..23.4)      1.76

The agnostic policy's unfair fraction is 0.031 above the table's at 2.6 jobs/h; no other
difference above 0.001. A second reading, table and ours only (``--sources table bayes``), gave
the same JCTs and decision ratios 2.00 / 2.02 / 1.83 (2.0 jobs/h) and 1.72 / 1.97 / 2.11 (2.6):
one seed's ratio moves by up to 0.3 between readings (2.26 was read while a test ran beside it),
so per seed ours sits at 1.7-2.1x, about the 2x line. ``max_min_fairness_packed``, gavel-2.0,
jobs 0-9 (``--window 0 10 --sources table bayes``): avg JCT 0.995 / 0.989 / 1.005, decision
7.23 / 5.12 / 4.65 x the table's.

Session 15 (issue 20): ours' profiling plan reads the exact posterior covariance (fd1d36d, was
512 draws) and the estimation stage refits only on a new cell, a failed launch, or a cell whose
reported seconds doubled since the last fit (``refit_growth`` 2, 9ec456d; it applies to Gavel's
and Sia's learners too). Same command as session 14, one process per rate running seeds 0 1 2
in turn, both rates side by side on 2 cores (load 2-4, other benchmarks beside them):

    rate  source    avg JCT              makespan  worst FTF             decision
    2.0   ours      0.994 (0.993..0.995) 0.998     0.874 (0.697..0.996)  1.51 (1.42..1.59)
          Gavel's   0.993 (0.992..0.994) 0.999     0.834 (0.672..0.963)  1.22
          Sia's     0.996 (0.995..0.996) 0.999     0.915 (0.818..0.972)  1.20
          agnostic  1.322 (1.305..1.339) 1.000     0.949 (0.685..1.131)  1.14
    2.6   ours      0.990 (0.967..1.005) 1.006     1.087 (0.959..1.298)  1.54 (1.48..1.57)
          Gavel's   0.989 (0.963..1.002) 1.012     0.873 (0.410..1.197)  1.29
          Sia's     1.004 (1.000..1.006) 1.006     1.294 (1.018..1.518)  1.19
          agnostic  1.744 (1.678..1.857) 1.357     12.2 (5.1..23.4)      1.66

Agnostic's unfair fraction is 0.024 above the table's at 2.6 jobs/h; no other difference above
0.001. Ours' worst seed is 1.005 (2.6, seed 2). The refit rule did most of it: the exact plan
alone (fd1d36d, ``--sources table bayes``, load 2-4) read 1.93 / 1.84 / 1.80 at 2.0 jobs/h and
1.82 / 2.01 / 1.59 at 2.6, inside the start's spread (396419b, same runs: 1.77-1.92 and
1.66-2.11), though its plan fell from 0.15 to 0.064 CPU ms a round (2.0, seed 0, timed per
part); with the rule ours refits at new information, not at every recompute, and recomputes
about as often as the table (4771 against 4766 at 2.0, seed 0). ``max_min_fairness_packed``,
jobs 0-9: avg JCT 0.996 / 0.988 / 0.999, decision 6.52 / 4.48 / 4.64 x the table's (not met:
6 hyperparameter fits, pair predictions and value-of-information solves in a 10-job warm-up).

Session 16, ``max_min_fairness_packed`` past the warm-up (7415335; the active-jobs curve is
level by job ~300 at 2.0 jobs/h): ``--window 1000 1050 --seeds 0 --settings gavel-2.0
--policies max_min_fairness_packed --sources table bayes --cpu-time`` (load 3-6): avg JCT
0.991, decision 3.77 x the table's (6.33 against 1.68 CPU ms a decision; 2.27 x in CPU per
round with the simulator). Jobs 0-9 read 5.76 / 4.89 / 4.81 and jobs 0-29 5.91 / 5.01 / 4.68 on
seeds 0 1 2 (load 4-7). Where ours' CPU goes (jobs 0-9, seed 0; 7.0 s against the table's
1.19): refits 1.8 (6 hyperparameter fits 1.1), mean rates of ~500 class and pair cells per
recompute 1.85, the value-of-information pass 1.6 (256-draw prediction 0.75, HiGHS 0.41), the
packed LP 0.6, the mechanism and the estimation stage ~0.7. Exact memos of the mean prediction,
cell lists and pair rows per (fit attempts, belief version, classes, pair-fit state) changed no
decision and gained nothing (the mean was reused at 4 of 206 recomputes; 3.75 x on the window
above): most recomputes follow a refit. Not met; not landed.

Session 17, where the CPU goes past the warm-up: cProfile of ``--window 1000 1010 --seeds 0
--settings gavel-2.0 --policies max_min_fairness_packed --sources S --cpu-time`` (load ~1;
profiled seconds, inflated for Python-heavy code; 5,388 rounds). Ours: decisions 41.3 s, of
them the 881 recomputes 28.0 (predicting the class and pair cells 14.7: feature rows 5.7, the
posterior's moments 11.2 with 1.5 of triangular solves; the value-of-information pass 8.1;
the packed LP 2.2) and the per-round rest 13.3 (the pair-fit masks and may-fit checks 3.8,
candidates and greedy 4.6); the estimation stage 6.0 (530 fits, 5.9). The table: decisions 8.2
s, its 839 recomputes 4.1 (LP 1.9), the per-round rest 4.1. Removing every per-round cost
ours adds would leave the recompute path alone at ~3.4x the table's whole decision time: the 2x
needs the prediction and value-of-information work per recompute cut by about 3x, not tuning.

Session 18, the packed decision time past the warm-up, ``--window 1000 1050 --seeds S --settings
gavel-2.0 --policies max_min_fairness_packed --sources table bayes --cpu-time --json``, one
process per seed in turn (load ~1; ratio to the table run of the same process):

    commit             seed  avg JCT  worst FTF  decision (ours / table CPU ms a round)
    12212fd (before)   0     0.991    0.646      5.09 (5.30 / 1.04)
                       1     0.995    1.098      5.20 (5.75 / 1.11)
                       2     1.006    1.136      4.93 (7.19 / 1.46)
    dfc9e72 (after)    0     0.993    0.733      3.47 (3.51 / 1.01)
                       1     0.988    1.192      3.10 (3.71 / 1.20)
                       2     1.001    1.067      3.18 (4.34 / 1.36)

(Two readings of ecf20a1, the same JCTs: 3.44 / 3.34 / 3.48 at load ~1, and 3.61 / 4.02 / 3.14
with a type check running beside it.) At gavel-2.6,
seed 0, the same window: avg JCT 0.929 of the table's before and 0.941 after, worst FTF 1.39 and
1.34, decision 5.08 x before and 3.29 x after (ours 8.21 / 5.66 ms). What changed: a
refit whose only news is failed launches keeps the rates' posterior (263 of 530 refits on
jobs 1000-1009) and a belief keeps the cells' moments it predicted, so a recompute predicts
only cells new since (of 829 recomputes' predictions, 288 had every cell to predict, 256
some, 285 none); the
value-of-information pass bounds each column's E[max(v, 0)] from the rates' log variances
before drawing (1 column in 27 drawn; 256 draws of ~5 cells instead of ~66, from their (N, N)
covariance's root); where pairs may fit is forgotten only for the class pairs a new failed
launch names. ``max_min_fairness_perf``, jobs 0-99, seed 0: the same average JCT (16.401 h)
at 1.52 x the table's decision time (1.69 before).

Where the rest goes (jobs 1000-1009, seed 0, CPU s, load ~1): ours 18.1 s of decisions with the
estimation stage, the table 4.95 (its CLARABEL solves 1.57). Ours' numerical work beyond the
table's: HiGHS's price solves and re-solves 1.45 and model builds 0.35, the covariance
(``potri``) 1.31 (most of it in the 6 hyperparameter fits' gradients; the fits 1.49 in all),
Cholesky factors 0.65, quadratic forms 0.43, triangular solves 0.33, CLARABEL 0.28 more: 4.8 s,
and the estimation stage's per-round reading of reports 0.6. With the table's 4.95 that is
10.35 s, 2.09 x the table's, before any of ours' bookkeeping (a second reading at load ~2:
table 5.86 s, numerical work beyond it 5.15, with the reading of reports 1.98 x): with
value-of-information exploration priced by HiGHS and an exact refit at each new cell, the 2x
is out of reach at these counts; reaching it needs fewer of them (e.g. hyperparameter fits or
the price LP off the decision path), not faster code. The other sources and rules on the
same jobs (1000-1009, seed 0, one process each with the table, ``--sources table S
[--exploration thompson]``; single readings move by ~10 %):

    learner   exploration             decision  avg JCT  new-cell GPU-h  failed-launch GPU-h
    ours      value of information    3.4-3.7   1.0050   751             668
    ours      Thompson                3.55      1.0005   482             370
    per_cell  value of information    2.35      0.9916   436             225
    per_cell  Thompson                1.70      1.0045   973             731

Refitting ours only on a new cell or a failed launch (``refit_growth`` infinite, not the
default; jobs 1000-1049, seeds 0 1 2): decision 2.95 / 2.69 / 2.81 x, avg JCT 0.991 / 0.981 /
1.018 of the table's (0.993 / 0.988 / 1.001 at the default 2): a third less time, still over
the 2x, and 1.7 % more JCT on seed 2.

The independent per-cell posterior meets the 2x with Thompson draws, at more exploration;
with the value of information its price LP alone puts it over. Ours with Thompson draws a
fresh joint sample each recompute, so every cell is predicted with its variance each time.

Session 19 (issue 20): what each part of learning costs in decision time. ``--exploration
none`` decides on the posterior mean and tries nothing; ``--refit-growth inf`` refits only on a
new cell or a failed launch. Jobs 1000-1049, ``--policies max_min_fairness_packed --sources
table S [--exploration E] [--refit-growth F] --cpu-time``, one process per (seed, row) with its
own table run, two processes at a time on 2 cores (load ~2), commit 37f5ee8. Ratios to the
table's run in the same process, per seed 0 / 1 / 2 (gavel-2.6: seeds 0 / 1):

    setting    learner   exploration   refits        avg JCT                decision
    gavel-2.0  ours      value of inf. default (2)   0.993 / 0.988 / 1.001  3.69 / 3.49 / 3.11
               ours      none          default       0.994 / 0.981 / 1.011  2.30 / 2.29 / 2.02
               ours      none          inf           0.992 / 0.972 / 1.010  2.05 / 1.89 / 1.93
               ours      value of inf. inf           0.991 / 0.981 / 1.018  3.15 / 2.77 / 2.57
               per_cell  Thompson      default       1.003 / 1.067 / 1.011  1.54 / 1.66 / 1.74
    gavel-2.6  ours      value of inf. default       0.941 / 0.961          3.34 / 3.12
               ours      none          default       0.928 / 0.999          2.06 / 1.86
               ours      none          inf           0.922 / 0.983          1.80 / 1.74
               ours      value of inf. inf           0.930 / 0.971          2.88 / 2.69

Worst FTF, gavel-2.0 (table 0.220 / 0.249 / 0.177): 0.162 / 0.296 / 0.189 with the defaults,
0.182 / 0.254 / 0.195 with none, 0.196 / 0.389 / 0.210 per_cell. So ours' estimation alone
(refits, posterior means of every cell an allocation needs, the report reading) takes 0.7-1.3
of the table's whole decision time, and the value-of-information pass (an LP for the prices
per recompute, of the allocation LP's size, plus its draws and re-solves) another 0.6-1.4: no
exploring configuration of ours measured is under 2.5x. The one configuration under 2x that
learns by posterior draws, per_cell with Thompson, is 6.7 % over the table's avg JCT on seed 1.
Deciding on the mean without trials sits at about the 2x line (2.06 / 1.86 at gavel-2.6;
1.74-2.05 with refits only on new cells), and its JCTs are within the seeds' spread of the
value-of-information rule's (better on 2 of the 5 (setting, seed), worse on 3; 1.1 % over the
table on gavel-2.0 seed 2, 3.8 % behind the value of information on gavel-2.6 seed 1).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SETTINGS = ("gavel-2.0", "gavel-2.6", "shockwave")

#: The heterogeneity-agnostic variant of each aware policy ("no estimation").
AGNOSTIC = {"max_min_fairness_perf": "max_min_fairness",
            "max_min_fairness_packed": "max_min_fairness",
            "finish_time_fairness_perf": "finish_time_fairness",
            "finish_time_fairness_packed": "finish_time_fairness"}


def _policy(policy: str, source: str, seed: int, throughputs: str,
            exploration: str | None = None, refit_growth: float | None = None
            ) -> tuple[Any, str, dict[str, Any] | None]:
    """A fresh policy for ``source``, the name it runs under and the estimators it reads
    (choices for the run driver; ``None``: the policy's default, the world's oracle).
    ``exploration``: the packed policy's option of that name, where given (``"none"``: decide
    on the posterior mean and try nothing); ``refit_growth``: the learner's option of that
    name, where given. ``source`` ``"oracle"`` is the oracle's table behind the learning stage
    (``oracle_stage``). A policy that still builds its own estimators (its ``source`` option)
    takes ``source`` and ``throughputs`` as options."""
    from bayes_sched.policies import POLICIES, make_policy

    options: dict[str, Any] = {"seed": seed}
    own = "source" in POLICIES.options(policy)
    if own:
        options["throughputs"] = throughputs
    if source == "table":
        return make_policy(policy, **options), policy, None
    learner = "oracle_stage" if source == "oracle" and not own else source
    if source == "agnostic":
        if policy in AGNOSTIC:
            return make_policy(AGNOSTIC[policy], **options), AGNOSTIC[policy], None
        learner = "uniform"
    estimator: dict[str, Any] = {}
    if exploration == "none" and "exploration" not in POLICIES.options(policy):
        options["thompson" if own else "acquisition"] = False if own else "mean"
    elif exploration is not None:
        options["exploration"] = exploration
    if refit_growth is not None:
        (options if own else estimator)["refit_growth"] = refit_growth
    ran = f"{policy} (uniform)" if source == "agnostic" else policy
    if own:
        return make_policy(policy, source=learner, **options), ran, None
    return make_policy(policy, **options), ran, {"throughput": {"name": learner, **estimator}}


def run_one(setting: str, policy_name: str, source: str, seed: int, window: tuple[int, int],
            noise: float, max_hours: float, exploration: str | None = None,
            clock: Callable[[], float] = time.perf_counter,
            timeline: WindowTimeline | None = None, refit_growth: float | None = None
            ) -> dict[str, Any]:
    """One run; ``clock`` times the loop's estimation and decisions (``time.process_time``:
    this process's CPU seconds); ``timeline`` records a Gavel run's active jobs per round;
    ``exploration``, ``refit_growth``: see :func:`_policy`."""
    from bayes_sched.sim.gavel_jobs import generate_continuous_jobs
    from bayes_sched.sim.shockwave_cluster import ShockwaveCluster
    from bayes_sched.sim.shockwave_jobs import read_shockwave_trace, shipped_shockwave_trace
    from bayes_sched.sim.table_run import run_table_simulation
    from bayes_sched.throughputs import load_shockwave_throughputs
    from bayes_sched.worlds import GAVEL, SHOCKWAVE

    steady: dict[str, float] = {}
    if setting == "shockwave":
        spec = SHOCKWAVE.cluster()
        policy, ran, estimators = _policy(policy_name, source, seed, "tacc", exploration,
                                          refit_growth)
        start = time.perf_counter()
        result = run_table_simulation(
            read_shockwave_trace(shipped_shockwave_trace("tacc_120")), policy, spec,
            table=load_shockwave_throughputs(), cluster_type=ShockwaveCluster,
            measurement_noise=noise, noise_seed=seed, max_time=max_hours * 3600.0, clock=clock,
            estimators=estimators, estimator_seed=seed)
        jobs = result.jobs
    else:
        rate = float(setting.split("-")[1])
        spec = GAVEL.cluster()
        policy, ran, estimators = _policy(policy_name, source, seed, "simulation", exploration,
                                          refit_growth)
        names = [str(i) for i in range(*window)]
        timeline = WindowTimeline() if timeline is None else timeline
        start = time.perf_counter()
        result = run_table_simulation(generate_continuous_jobs(rate, seed, True), policy, spec,
                                      jobs_to_complete=names, measurement_noise=noise,
                                      noise_seed=seed, max_time=max_hours * 3600.0,
                                      clock=clock, on_round=timeline.record,
                                      estimators=estimators, estimator_seed=seed)
        jobs = result.jobs.set_index("job").loc[names].reset_index()
        steady = timeline.summary(window[0])
    wall = time.perf_counter() - start
    finished = jobs["jct"].notna()
    rho = jobs["ftf"].to_numpy()
    summary = result.summary
    per_round = result.decision_seconds + (result.estimate_seconds
                                           if len(result.estimate_seconds) else 0.0)
    return {
        "setting": setting, "policy": policy_name, "source": source, "ran_as": ran,
        "seed": seed, "jobs": len(jobs), "finished": int(finished.sum()),
        "avg_jct_h": float(jobs["jct"].mean() / 3600.0),
        "makespan_h": float((jobs["completion_time"].max() - jobs["submit_time"].min())
                            / 3600.0),
        "worst_ftf": float(np.nanmax(rho)) if finished.any() else float("nan"),
        "unfair_frac": float(np.mean(rho[finished.to_numpy()] > 1.05)) if finished.any()
        else float("nan"),
        "profiling_gpu_h": float(summary.get("profiling_gpu_hours", 0.0)),
        "new_cell_gpu_h": float(summary.get("first_visit_gpu_hours", float("nan"))),
        "failed_launch_gpu_h": float(summary.get("failed_launch_gpu_hours", 0.0)),
        "decision_ms": float(1000 * np.mean(per_round)) if len(per_round) else 0.0,
        "fit_ms": float(1000 * summary.get("fit_seconds", 0.0)
                        / max(summary.get("fits", 0.0), 1.0)),
        "rounds": int(summary["rounds"]), "lp_solves": int(summary.get("allocation_updates", 0)),
        "wall_s": round(wall, 1), **steady,
    }


class WindowTimeline:
    """Per round of a Gavel-setting run: jobs arrived so far, jobs active, and this process's
    CPU seconds (what tells when the cluster reaches a steady state, and whether a round costs
    more as jobs accumulate)."""

    def __init__(self) -> None:
        self.arrived: list[int] = []
        self.active: list[int] = []
        self.cpu_seconds: list[float] = []

    def record(self, cluster: Any) -> None:
        self.arrived.append(len(cluster.jobs))
        self.active.append(cluster.timeline_active[-1])
        self.cpu_seconds.append(time.process_time())

    def summary(self, first: int) -> dict[str, float]:
        """``active_at_window``: active jobs in the round job ``first`` arrived;
        ``active_window_mean``: mean active jobs from then to the run's end;
        ``cpu_ms_per_round_before`` / ``_window``: CPU ms per round before that round and from
        it on (NaN where a phase has no rounds)."""
        arrived = np.array(self.arrived)
        if not len(arrived):
            return {}
        at = int(np.searchsorted(arrived, first + 1))  # first round with job ``first`` in
        cpu = np.diff(np.array([self.cpu_seconds[0], *self.cpu_seconds]))

        def per_round(part: np.ndarray) -> float:
            return float(1000 * part.mean()) if len(part) else float("nan")

        return {"active_at_window": float(self.active[min(at, len(arrived) - 1)]),
                "active_window_mean": (float(np.mean(self.active[at:])) if at < len(arrived)
                                       else float("nan")),
                "cpu_ms_per_round_before": per_round(cpu[1:at]),
                "cpu_ms_per_round_window": per_round(cpu[max(at, 1):])}

    def curve(self, every: int) -> list[dict[str, float]]:
        """Active jobs and CPU ms per round at every ``every``-th arrival (mean over the rounds
        since the last row)."""
        rows: list[dict[str, float]] = []
        last = 0
        for i, n in enumerate(self.arrived):
            if n >= (len(rows) + 1) * every:
                span = self.cpu_seconds[i] - self.cpu_seconds[last]
                rows.append({"jobs_arrived": n, "active": self.active[i],
                             "cpu_ms_per_round": 1000 * span / max(i - last, 1)})
                last = i
        return rows


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (setting, policy, source): the source's ratio to the table run of the same seed on
    every metric, mean and range over the seeds; decision time over the table's."""
    base = {(r["setting"], r["policy"], r["seed"]): r for r in rows if r["source"] == "table"}
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["source"] != "table" and (row["setting"], row["policy"], row["seed"]) in base:
            groups.setdefault((row["setting"], row["policy"], row["source"]), []).append(row)
    out = []
    for (setting, policy, source), group in groups.items():
        entry: dict[str, Any] = {"setting": setting, "policy": policy, "source": source,
                                 "seeds": len(group)}
        for metric in ("avg_jct_h", "makespan_h", "worst_ftf", "decision_ms"):
            values = np.array([row[metric] / base[(setting, policy, row["seed"])][metric]
                               for row in group])
            entry[metric.removesuffix("_h").removesuffix("_ms") + "_ratio"] = (
                f"{values.mean():.3f} ({values.min():.3f}..{values.max():.3f})")
        unfair = np.array([row["unfair_frac"] - base[(setting, policy, row["seed"])][
            "unfair_frac"] for row in group])
        entry["unfair_diff"] = f"{unfair.mean():+.3f} ({unfair.min():+.3f}..{unfair.max():+.3f})"
        for metric in ("profiling_gpu_h", "new_cell_gpu_h", "failed_launch_gpu_h"):
            entry[metric] = round(float(np.mean([r[metric] for r in group])), 1)
        out.append(entry)
    return out


def main() -> None:
    from bayes_sched.estimation.learners import LEARNERS
    from bayes_sched.tables import print_table

    learners = [name for name in LEARNERS if name not in ("oracle", "uniform")]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    parser.add_argument("--window", type=int, nargs=2, default=[4000, 5000],
                        help="jobs measured in the Gavel settings (Gavel: 4000 5000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sources", nargs="+", default=["table", "agnostic", *learners],
                        choices=["table", "agnostic", *LEARNERS])
    parser.add_argument("--policies", nargs="+", default=["max_min_fairness_perf"],
                        help="time-sharing policies of the Gavel settings")
    parser.add_argument("--shockwave-policies", nargs="+",
                        default=["max_sum_throughput_perf"],
                        help="time-sharing policies of the Shockwave setting (on one GPU type "
                             "max-min fairness and FTF do not depend on the rates)")
    parser.add_argument("--noise", type=float, default=0.05,
                        help="log-scale sd of the noise on reported steps/s")
    parser.add_argument("--max-hours", type=float, default=5000.0,
                        help="simulated hours after which a run gives up")
    parser.add_argument("--cpu-time", action="store_true",
                        help="decision and estimation times in CPU seconds, not wall")
    parser.add_argument("--exploration", choices=["thompson", "value_of_information", "none"],
                        help="the learner sources' exploration rule (packed max-min; default: "
                             "the policy's; none: decide on the posterior mean, try nothing)")
    parser.add_argument("--refit-growth", type=float, metavar="F",
                        help="the learner sources' refit_growth (default: the policy's; inf: "
                             "refit on new cells and failed launches only)")
    parser.add_argument("--timeline", type=int, default=0, metavar="N",
                        help="Gavel settings: after each run, print its active jobs and CPU ms "
                             "per round at every N-th arrival (where the steady state starts)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.window[0] < 0 or args.window[1] <= args.window[0] or args.timeline < 0:
        parser.error("--window A B: expected 0 <= A < B; --timeline: expected N >= 0")
    clock = time.process_time if args.cpu_time else time.perf_counter
    rows = []
    for setting in args.settings:
        policies = args.shockwave_policies if setting == "shockwave" else args.policies
        for policy in policies:
            for seed in args.seeds:
                for source in args.sources:
                    timeline = WindowTimeline()
                    row = run_one(setting, policy, source, seed, tuple(args.window), args.noise,
                                  args.max_hours, args.exploration, clock, timeline,
                                  args.refit_growth)
                    rows.append(row)
                    if not args.json:
                        print(" ".join(f"{k}={round(v, 3) if isinstance(v, float) else v}"
                                       for k, v in row.items()), flush=True)
                        if args.timeline and setting != "shockwave":
                            print_table(timeline.curve(args.timeline),
                                        title=f"{setting} {source} seed {seed}: active jobs")
    summary = ratios(rows)
    if args.json:
        print(json.dumps({"runs": rows, "ratios_to_table": summary}))
        return

    window = (f", Gavel window {args.window[0]}-{args.window[1] - 1}"
              if set(args.settings) - {"shockwave"} else "")
    print_table(rows, title=f"runs (noise {args.noise}{window})")
    print_table(summary, title="ratio to the table (oracle): mean (min..max) over seeds; "
                                  "unfair fraction: difference")


if __name__ == "__main__":
    main()
