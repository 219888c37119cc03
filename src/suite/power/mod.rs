//! Probe power: how many plausible wrong versions of a task's reference change its probes
//! reject, and whether they accept behaviour-preserving rewrites of it (`infradev tasks power`,
//! docs/tasks.md "Probe power").
//!
//! This module is the pure part: which candidates are graded ([`select`]), what a graded
//! mutant or variant counts as ([`judge_mutant`], [`judge_variant`]), the kill rate
//! ([`kill_rate`]), the probe files' digest ([`probes_digest`]), the hunks of the reference
//! change ([`changed_ranges`]) and whether a recorded figure still holds ([`assess`]). The
//! runs themselves (the mutation tool, the commits, the grades) are in [`run`].

pub mod run;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::grading::Outcome;
pub use crate::task::Scope;

pub use crate::task::{DEFAULT_THRESHOLD, probes_digest, read_probe_files};
/// The probe workloads every candidate is judged on. Seed 0 is the workload of every real
/// grade (probes read no seed then); seed 1 is a second workload, for the equivalence check.
pub const SEEDS: [u32; 2] = [0, 1];
/// The variable the judge's probes read their seed from (`int(os.environ.get(..., "0"))`).
pub const SEED_ENV: &str = "INFRADEV_PROBE_SEED";

/// A candidate as runners/tasks/mutate.py prints it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Candidate {
    pub id: String,
    pub kind: Kind,
    pub operator: String,
    pub path: String,
    pub line: u32,
    pub col: u32,
    pub original: String,
    pub replacement: String,
    /// The whole file with the change applied.
    pub source: String,
    /// Compiles to the same code objects as the reference (trivially equivalent).
    pub bytecode_equal: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A plausible fault: the probes must reject it.
    Mutant,
    /// A behaviour-preserving rewrite: the probes must accept it.
    Variant,
}

/// The candidates to grade: at most `cap` per (kind, operator), chosen by id (a hash, so the
/// choice is spread over the change and the same on every run), in file order.
pub fn select(candidates: &[Candidate], cap: usize) -> Vec<&Candidate> {
    let mut groups: BTreeMap<(Kind, &str), Vec<&Candidate>> = BTreeMap::new();
    for c in candidates {
        groups.entry((c.kind, &c.operator)).or_default().push(c);
    }
    let mut chosen: Vec<&Candidate> = groups
        .into_values()
        .flat_map(|mut g| {
            g.sort_by(|a, b| a.id.cmp(&b.id));
            g.truncate(cap);
            g
        })
        .collect();
    chosen.sort_by(|a, b| {
        (a.kind, &a.path, a.line, a.col, &a.id).cmp(&(b.kind, &b.path, b.line, b.col, &b.id))
    });
    chosen
}

/// How many candidates each operator produced and how many were graded (the cap's effect).
pub fn operator_counts(candidates: &[Candidate], selected: &[&Candidate]) -> Vec<OperatorCount> {
    let mut counts: BTreeMap<(Kind, String), (usize, usize)> = BTreeMap::new();
    for c in candidates {
        counts.entry((c.kind, c.operator.clone())).or_default().0 += 1;
    }
    for c in selected {
        counts.entry((c.kind, c.operator.clone())).or_default().1 += 1;
    }
    counts
        .into_iter()
        .map(|((kind, operator), (generated, graded))| OperatorCount {
            kind,
            operator,
            generated,
            graded,
        })
        .collect()
}

/// Test id → outcome, for one phase of one grade.
pub type Outcomes = BTreeMap<String, Outcome>;

/// What a graded mutant counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// An official test does not pass (or the module does not import): not a candidate.
    Discarded,
    /// A probe failed on the real grades' workload (seed 0).
    Killed,
    /// Passed every official test and every probe on seed 0.
    Survived,
    /// The same outcome as the reference on every official test and probe on every seed,
    /// with evidence of equivalence (identical bytecode, or a reason in power.toml).
    PossiblyEquivalent,
    /// A fault of ours (a sandbox that did not come up): not counted.
    Error,
}

/// The judgement of one mutant.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub status: Status,
    /// The probes that failed on seed 0.
    pub killed_by: Vec<String>,
    /// Official tests that did not pass (discarded mutants).
    pub official_failed: Vec<String>,
    /// Probes that failed only on another seed: the real workload misses this mutant.
    pub other_seed_kills: Vec<String>,
    pub note: Option<String>,
}

/// Why a mutant that behaves like the reference everywhere is taken as equivalent.
#[derive(Debug, Clone, PartialEq)]
pub enum Evidence {
    /// runners/tasks/mutate.py found the same code objects as the reference.
    Bytecode,
    /// A reviewed reason from the task's power.toml.
    Reviewed(String),
}

/// The tests whose outcome differs from the reference's (a test the reference has and the
/// run does not counts as differing: unreported is never passed).
fn differing(run: &Outcomes, reference: &Outcomes) -> Vec<String> {
    reference
        .iter()
        .filter(|(id, want)| run.get(*id) != Some(want))
        .map(|(id, _)| id.clone())
        .collect()
}

/// Probes with a time budget measure wall-clock time on a shared machine: a failure of only
/// such probes is graded again, and [`reproduced`] keeps a failure only when both grades agree.
/// `budgeted` lists the probes (test ids) with a time budget.
pub fn needs_confirmation(run: &Outcomes, reference: &Outcomes, budgeted: &[String]) -> bool {
    let failed = differing(run, reference);
    !failed.is_empty() && failed.iter().all(|id| budgeted.contains(id))
}

/// Two grades of the same head on the same seed: a test counts as not passing only when it
/// did not pass in either (a time budget missed once under load is not a kill).
pub fn reproduced(first: &Outcomes, second: &Outcomes) -> Outcomes {
    first
        .iter()
        .map(|(id, o)| match second.get(id) {
            Some(Outcome::Passed) => (id.clone(), Outcome::Passed),
            _ => (id.clone(), *o),
        })
        .collect()
}

/// The note of a survivor that behaved like the reference on every seed: the only survivor
/// a reviewed reason can turn into "possibly equivalent" (see [`rejudge`]).
pub const NO_EVIDENCE: &str = "same outcome as the reference on every seed, with no evidence of \
                               equivalence: a probe should tell it apart (or power.toml should \
                               say why it is equivalent)";

const REVIEWED: &str = "reviewed: ";

/// Applies power.toml's reviewed equivalents (`mutant id → reason`) to a record as it stands,
/// without grading again: a survivor graded alike on every seed that is now listed becomes
/// "possibly equivalent"; one taken as equivalent on a reason no longer listed is a survivor
/// again. Bytecode evidence, kills and other survivors are kept. Returns the ids that changed.
pub fn rejudge(record: &mut PowerRecord, reviewed: &BTreeMap<String, String>) -> Vec<String> {
    let mut changed = Vec::new();
    for m in &mut record.mutants {
        let listed = reviewed.get(&m.site.id);
        let was_reviewed = m.status == Status::PossiblyEquivalent
            && m.note.as_deref().is_some_and(|n| n.starts_with(REVIEWED));
        let alike_on_every_seed = m.status == Status::Survived
            && m.other_seed_kills.is_empty()
            && m.note.as_deref() == Some(NO_EVIDENCE);
        let note = match (listed, was_reviewed || alike_on_every_seed) {
            (Some(reason), true) => {
                m.status = Status::PossiblyEquivalent;
                format!("{REVIEWED}{reason}")
            }
            (None, true) if was_reviewed => {
                m.status = Status::Survived;
                NO_EVIDENCE.to_owned()
            }
            _ => continue,
        };
        if m.note.as_deref() != Some(note.as_str()) {
            m.note = Some(note);
            changed.push(m.site.id.clone());
        }
    }
    record.recount();
    changed
}

/// Narrows a record to a scope that leaves out more files than it did when computed (power.toml
/// gained `out_of_scope` entries): the mutants and variants in those files are dropped, and
/// their operators' graded counts with them. A scope that covers a file the record left out
/// needs grading, so it is an error naming the file. Returns the candidates dropped. (An
/// operator's `generated` count keeps the candidates made in the dropped files.)
pub fn narrow_scope(record: &mut PowerRecord, scope: &Scope) -> Result<Vec<String>, String> {
    let path_of = |site: &Site| {
        let mut parts = site.location.rsplitn(3, ':');
        let (_col, _line) = (parts.next(), parts.next());
        parts.next().unwrap_or_default().to_owned()
    };
    if record.only != scope.only {
        return Err(format!(
            "power.toml's `only` names {} now, the record was computed on {}",
            list_or_nothing(&scope.only),
            list_or_nothing(&record.only)
        ));
    }
    if let Some(back) = record
        .out_of_scope
        .iter()
        .find(|p| !scope.out_of_scope.contains(p))
    {
        return Err(format!(
            "{back} is back in scope: its mutants were never graded"
        ));
    }
    let mut dropped = Vec::new();
    let mut graded_less: BTreeMap<(Kind, String), usize> = BTreeMap::new();
    let mut outside = |kind: Kind, site: &Site| {
        let out = !scope.covers(&path_of(site));
        if out {
            dropped.push(site.id.clone());
            *graded_less
                .entry((kind, site.operator.clone()))
                .or_default() += 1;
        }
        out
    };
    record.mutants.retain(|m| !outside(Kind::Mutant, &m.site));
    record.variants.retain(|v| !outside(Kind::Variant, &v.site));
    for op in &mut record.operators {
        if let Some(n) = graded_less.get(&(op.kind, op.operator.clone())) {
            op.graded -= n;
        }
    }
    record.out_of_scope = scope.out_of_scope.clone();
    record.recount();
    Ok(dropped)
}

/// Judges a mutant from its official outcomes and its probe outcomes per seed, against the
/// reference's. `probes` holds the seeds that were graded, in order (seed 0 first); a mutant
/// killed on seed 0 need not be graded on the others.
pub fn judge_mutant(
    official: &Outcomes,
    probes: &[(u32, Outcomes)],
    reference_official: &Outcomes,
    reference_probes: &[(u32, Outcomes)],
    evidence: Option<&Evidence>,
) -> Judgement {
    let mut j = Judgement {
        status: Status::Survived,
        killed_by: Vec::new(),
        official_failed: differing(official, reference_official),
        other_seed_kills: Vec::new(),
        note: None,
    };
    if !j.official_failed.is_empty() {
        j.status = Status::Discarded;
        return j;
    }
    let reference_for = |seed: u32| reference_probes.iter().find(|(s, _)| *s == seed);
    let mut every_seed_graded = true;
    for &seed in &SEEDS {
        let (Some((_, run)), Some((_, want))) =
            (probes.iter().find(|(s, _)| *s == seed), reference_for(seed))
        else {
            every_seed_graded = false;
            continue;
        };
        let failed = differing(run, want);
        if seed == SEEDS[0] {
            j.killed_by = failed;
        } else {
            for id in failed {
                if !j.killed_by.contains(&id) && !j.other_seed_kills.contains(&id) {
                    j.other_seed_kills.push(id);
                }
            }
        }
    }
    if !j.killed_by.is_empty() {
        j.status = Status::Killed;
    } else if !j.other_seed_kills.is_empty() {
        j.note = Some(format!(
            "killed only on seed {}: the real grades' workload (seed 0) misses it",
            SEEDS[1]
        ));
    } else if !every_seed_graded {
        j.note = Some("not graded on every seed".into());
    } else {
        match evidence {
            Some(Evidence::Bytecode) => {
                j.status = Status::PossiblyEquivalent;
                j.note = Some("compiles to the reference's bytecode".into());
            }
            Some(Evidence::Reviewed(reason)) => {
                j.status = Status::PossiblyEquivalent;
                j.note = Some(format!("{REVIEWED}{reason}"));
            }
            None => j.note = Some(NO_EVIDENCE.into()),
        }
    }
    j
}

/// What a graded variant counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VariantStatus {
    /// Every official test and probe passed: the probes accept the rewrite.
    Accepted,
    /// A probe failed: the probe is overfitted to the reference's implementation.
    Rejected,
    /// An official test failed (the rewrite is not equivalent after all, or the official
    /// tests are overfitted): not held against the probes.
    OfficialFailed,
    Error,
}

/// Judges a variant: `(status, failing tests)`.
pub fn judge_variant(
    official: &Outcomes,
    probes: &Outcomes,
    reference_official: &Outcomes,
    reference_probes: &Outcomes,
) -> (VariantStatus, Vec<String>) {
    let official_failed = differing(official, reference_official);
    if !official_failed.is_empty() {
        return (VariantStatus::OfficialFailed, official_failed);
    }
    let rejected_by = differing(probes, reference_probes);
    if rejected_by.is_empty() {
        (VariantStatus::Accepted, rejected_by)
    } else {
        (VariantStatus::Rejected, rejected_by)
    }
}

/// Killed over official-passing, non-equivalent mutants (killed + survived); `None` when
/// there is none.
pub fn kill_rate(statuses: &[Status]) -> Option<f64> {
    let killed = statuses.iter().filter(|s| **s == Status::Killed).count();
    let survived = statuses.iter().filter(|s| **s == Status::Survived).count();
    (killed + survived > 0).then(|| killed as f64 / (killed + survived) as f64)
}

/// The reference-side line ranges of each file's hunks in a `git diff -U0` (pure deletions
/// leave no line on the reference side and give no range).
pub fn changed_ranges(diff: &str) -> BTreeMap<String, Vec<(u32, u32)>> {
    let mut out: BTreeMap<String, Vec<(u32, u32)>> = BTreeMap::new();
    let mut file: Option<String> = None;
    for line in diff.lines() {
        if let Some(path) = line.strip_prefix("+++ ") {
            file = path.strip_prefix("b/").map(str::to_owned);
            continue;
        }
        let (Some(f), Some(rest)) = (&file, line.strip_prefix("@@ ")) else {
            continue;
        };
        let Some(new) = rest.split_whitespace().find_map(|w| w.strip_prefix('+')) else {
            continue;
        };
        let (start, count) = match new.split_once(',') {
            Some((s, n)) => (s.parse::<u32>(), n.parse::<u32>()),
            None => (new.parse::<u32>(), Ok(1)),
        };
        if let (Ok(start), Ok(count)) = (start, count)
            && count > 0
        {
            out.entry(f.clone())
                .or_default()
                .push((start, start + count - 1));
        }
    }
    out
}

/// The `power` record in validation.json (docs/tasks-format.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerRecord {
    /// RFC 3339, UTC.
    pub computed_at: String,
    pub infradev_version: String,
    /// [`probes_digest`] of the probe directory the figures were computed against.
    pub probes_digest: String,
    /// The reference commit graded (for release sources, the commit made from its sdist).
    pub reference_commit: String,
    /// The kill rate the task must reach.
    pub threshold: f64,
    /// At most this many candidates of each operator were graded.
    pub cap_per_operator: usize,
    /// Files of the upstream change left out (power.toml `out_of_scope`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub out_of_scope: Vec<String>,
    /// The only files of the change that got mutants (power.toml `only`), sorted; empty: all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub only: Vec<String>,
    pub seeds: Vec<u32>,
    /// Killed / (killed + survived); `null` when no mutant passed the official tests.
    pub kill_rate: Option<f64>,
    pub counts: Counts,
    pub operators: Vec<OperatorCount>,
    pub mutants: Vec<MutantRecord>,
    pub variants: Vec<VariantRecord>,
    /// Wall-clock seconds the analysis took.
    pub duration_s: f64,
}

impl PowerRecord {
    /// Recomputes the counts and the kill rate from the mutants and variants it holds.
    fn recount(&mut self) {
        self.counts = Counts::of(&self.mutants, &self.variants);
        let statuses: Vec<Status> = self.mutants.iter().map(|m| m.status).collect();
        self.kill_rate = kill_rate(&statuses);
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub mutants: usize,
    pub discarded: usize,
    pub killed: usize,
    pub survived: usize,
    pub possibly_equivalent: usize,
    pub errors: usize,
    pub variants: usize,
    pub variants_accepted: usize,
    pub variants_rejected: usize,
}

impl Counts {
    pub fn of(mutants: &[MutantRecord], variants: &[VariantRecord]) -> Counts {
        let m = |s: Status| mutants.iter().filter(|r| r.status == s).count();
        let v = |s: VariantStatus| variants.iter().filter(|r| r.status == s).count();
        Counts {
            mutants: mutants.len(),
            discarded: m(Status::Discarded),
            killed: m(Status::Killed),
            survived: m(Status::Survived),
            possibly_equivalent: m(Status::PossiblyEquivalent),
            errors: m(Status::Error),
            variants: variants.len(),
            variants_accepted: v(VariantStatus::Accepted),
            variants_rejected: v(VariantStatus::Rejected),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorCount {
    pub kind: Kind,
    pub operator: String,
    pub generated: usize,
    pub graded: usize,
}

/// Where a candidate changes the reference, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Site {
    /// Stable: the same reference change always gives the same ids.
    pub id: String,
    pub operator: String,
    /// `path:line:col` in the reference.
    pub location: String,
    pub original: String,
    pub replacement: String,
}

impl Site {
    pub fn of(c: &Candidate) -> Site {
        Site {
            id: c.id.clone(),
            operator: c.operator.clone(),
            location: format!("{}:{}:{}", c.path, c.line, c.col),
            original: c.original.clone(),
            replacement: c.replacement.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MutantRecord {
    #[serde(flatten)]
    pub site: Site,
    pub status: Status,
    /// `passed`, `failed` or `error`.
    pub official: String,
    /// `killed`, `passed` (on every seed graded) or `not_run` (discarded, error).
    pub probes: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub official_failed: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub killed_by: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_seed_kills: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl MutantRecord {
    pub fn new(site: Site, j: Judgement) -> MutantRecord {
        let official = match j.status {
            Status::Discarded => "failed",
            Status::Error => "error",
            _ => "passed",
        };
        let probes = match j.status {
            Status::Killed => "killed",
            Status::Survived | Status::PossiblyEquivalent => "passed",
            Status::Discarded | Status::Error => "not_run",
        };
        MutantRecord {
            site,
            status: j.status,
            official: official.into(),
            probes: probes.into(),
            official_failed: j.official_failed,
            killed_by: j.killed_by,
            other_seed_kills: j.other_seed_kills,
            note: j.note,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantRecord {
    #[serde(flatten)]
    pub site: Site,
    pub status: VariantStatus,
    /// The tests that did not pass (probes for `rejected`, official tests otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What `tasks check` says about a task's probe power.
#[derive(Debug, Clone, PartialEq)]
pub enum Assessment {
    /// No power record yet: shown, not a failure (a task is analysed once its probes settle).
    NotMeasured,
    /// The record holds: its digest is the probes' and its figures meet the threshold.
    Holds {
        kill_rate: Option<f64>,
        counts: Counts,
    },
    /// Problems that fail the check.
    Fails(Vec<String>),
}

/// Judges a task's recorded power against its probes as they are now. Pure.
/// `scope` is which files power.toml gives mutants now.
pub fn assess(
    record: Option<&PowerRecord>,
    current_digest: &str,
    config: &crate::task::PowerConfig,
) -> Assessment {
    let (threshold, scope) = (config.threshold, &config.scope());
    let Some(r) = record else {
        return Assessment::NotMeasured;
    };
    let mut problems = Vec::new();
    let out_of_scope = &scope.out_of_scope;
    if r.only != scope.only {
        problems.push(format!(
            "power.toml's `only` names {} now, the power record was computed on {}: run \
             `infradev tasks power` again",
            list_or_nothing(&scope.only),
            list_or_nothing(&r.only)
        ));
    }
    if &r.out_of_scope != out_of_scope {
        problems.push(format!(
            "power.toml leaves out {} now, the power record was computed leaving out {}: run \
             `infradev tasks power` again",
            list_or_nothing(out_of_scope),
            list_or_nothing(&r.out_of_scope)
        ));
    }
    if !config.carries(&r.probes_digest, current_digest) {
        problems.push(format!(
            "the power record is older than the probes (recorded against {}, the probes are \
             now {}): run `infradev tasks power` again",
            short_digest(&r.probes_digest),
            short_digest(current_digest)
        ));
    }
    match r.kill_rate {
        Some(rate) if rate + 1e-9 < threshold => problems.push(format!(
            "kill rate {} is under the threshold {} ({} survivor(s))",
            percent(rate),
            percent(threshold),
            r.counts.survived
        )),
        None => problems.push("no mutant passed the official tests: no kill rate".into()),
        Some(_) => {}
    }
    if r.counts.variants_rejected > 0 {
        problems.push(format!(
            "{} behaviour-preserving variant(s) rejected by the probes",
            r.counts.variants_rejected
        ));
    }
    if problems.is_empty() {
        Assessment::Holds {
            kill_rate: r.kill_rate,
            counts: r.counts.clone(),
        }
    } else {
        Assessment::Fails(problems)
    }
}

fn list_or_nothing(paths: &[String]) -> String {
    if paths.is_empty() {
        "nothing".to_owned()
    } else {
        paths.join(", ")
    }
}

fn short_digest(d: &str) -> &str {
    let hexpart = d.strip_prefix("sha256:").unwrap_or(d);
    &hexpart[..hexpart.len().min(12)]
}

/// `93.5 %`.
pub fn percent(rate: f64) -> String {
    format!("{:.1} %", rate * 100.0)
}

#[cfg(test)]
mod tests;
