//! Reading Slurm's answers (pure): the live job record, the job-completion log, what the two
//! together say about a submission, and which failures are worth retrying.
//!
//! Why two sources: the live record (`scontrol show job`) has the exact state, reason, exit code
//! and restart count, but disappears `MinJobAge` seconds after the job ends and never says *why*
//! a job went back to the queue (PREEMPTED never shows there). The job-completion log
//! (`jobcomp/filetxt`, read with `sacct -c`) keeps one line per run, including the lost ones
//! (NODE_FAIL, PREEMPTED, PENDING for `scontrol requeue`), and survives purges and controller
//! restarts, but loses signal exit codes (measured on Slurm 22.05.8: a job cancelled while running
//! is `CANCELLED 0:15` in `scontrol`, `CANCELLED 0:0` in `sacct -c`).

use crate::service::backend::{BackendError, Outcome, RemoteState};

/// The live record of one job, from `scontrol show job -o <id>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LiveJob {
    pub job_id: String,
    /// `JobName`, the dispatch's [`crate::service::backend::Submission::name`].
    pub name: Option<String>,
    /// `JobState`: `PENDING`, `RUNNING`, `COMPLETED`, `NODE_FAIL`, …
    pub state: String,
    /// `Reason`; `None` when Slurm says `None`.
    pub reason: Option<String>,
    /// `Restarts`: how many runs were lost to a requeue.
    pub restarts: u32,
    /// `NodeList`; `None` while pending (`(null)`).
    pub node: Option<String>,
    /// `ExitCode` as `status:signal` (`3:0`, `0:15`).
    pub exit_code: String,
    /// `Requeue`: whether Slurm will requeue the job after a node failure.
    pub requeue: bool,
}

/// One run of a job in the job-completion log (`sacct -c`); a requeued job has several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompRun {
    pub job_id: String,
    /// How the run ended: `COMPLETED`, `NODE_FAIL`, `PREEMPTED`, `PENDING` (requeued by hand), …
    pub state: String,
    /// `status:signal`; signals are lost here (a cancelled run shows `0:0`).
    pub exit_code: String,
    pub node: Option<String>,
}

/// Whether scontrol's or squeue's failure means the controller does not (or no longer) know
/// the job: purged after `MinJobAge`, or never submitted to this controller.
pub fn is_unknown_job(stderr: &str) -> bool {
    stderr.contains("Invalid job id specified")
}

/// Splits one `scontrol -o` line into `Key=Value` pairs. Values may contain spaces
/// (`Comment=infradev job 42`, `Command=/x y`), so a value runs until the next word that looks
/// like a key (`Name=`, names of letters, digits, `_`, `:` and `/`, as in `AllocNode:Sid`). The
/// first occurrence of a key wins: the fields we read come before free text such as `Comment`,
/// so a comment containing `JobState=…` cannot shadow them.
fn fields(line: &str) -> Vec<(&str, String)> {
    let key_of = |word: &str| -> Option<usize> {
        let eq = word.find('=')?;
        let key = &word[..eq];
        let mut bytes = key.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphabetic());
        (first_ok && bytes.all(|b| b.is_ascii_alphanumeric() || b"_:/".contains(&b))).then_some(eq)
    };
    let mut out: Vec<(&str, String)> = Vec::new();
    for word in line.split_whitespace() {
        match key_of(word) {
            Some(eq) => out.push((&word[..eq], word[eq + 1..].to_owned())),
            None => {
                if let Some((_, value)) = out.last_mut() {
                    value.push(' ');
                    value.push_str(word);
                }
            }
        }
    }
    out
}

/// Parses `scontrol show job -o <id>` (one line per job) into the record of job `id`.
///
/// Errors name what was missing, with the output, so a format change in another Slurm version
/// is obvious in the log.
pub fn parse_scontrol_job(output: &str, id: &str) -> Result<LiveJob, String> {
    let records: Vec<Vec<(&str, String)>> = output
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(fields)
        .collect();
    let get = |record: &[(&str, String)], key: &str| -> Option<String> {
        record
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    };
    let record = records
        .iter()
        .find(|r| get(r, "JobId").as_deref() == Some(id))
        .ok_or_else(|| format!("no JobId={id} in scontrol's answer: {:?}", output.trim()))?;
    let state = get(record, "JobState")
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .ok_or_else(|| format!("no JobState for job {id} in scontrol's answer: {output:?}"))?;
    let restarts = match get(record, "Restarts") {
        None => 0,
        Some(n) => n
            .parse()
            .map_err(|_| format!("job {id}: Restarts={n:?} is not a number"))?,
    };
    let present = |v: Option<String>| v.filter(|s| !s.is_empty() && s != "(null)");
    Ok(LiveJob {
        job_id: id.to_owned(),
        name: present(get(record, "JobName")),
        state,
        reason: present(get(record, "Reason")).filter(|r| r != "None"),
        restarts,
        node: present(get(record, "NodeList")),
        exit_code: get(record, "ExitCode").unwrap_or_else(|| "0:0".into()),
        requeue: get(record, "Requeue").as_deref() == Some("1"),
    })
}

/// Parses `sacct -c -j <id> -P -n --format=JobID,State,ExitCode,NodeList` into the runs of job
/// `id`, oldest first (the log is appended as runs end). Lines of other jobs or steps, and lines
/// without four fields, are not runs of this job and are skipped.
pub fn parse_sacct_runs(output: &str, id: &str) -> Vec<CompRun> {
    output
        .lines()
        .filter_map(|line| {
            let parts: Vec<&str> = line.trim().split('|').collect();
            let [job, state, exit, node] = parts[..] else {
                return None;
            };
            (job == id).then(|| CompRun {
                job_id: job.to_owned(),
                // Plain sacct writes "CANCELLED by 0"; the word is the state.
                state: state.split_whitespace().next().unwrap_or("").to_owned(),
                exit_code: exit.to_owned(),
                node: (!node.is_empty() && node != "None assigned" && node != "(null)")
                    .then(|| node.to_owned()),
            })
        })
        .collect()
}

/// The outcome of a Slurm end state; `None` for states in which the job is not over. `ran`:
/// whether the job ever had a node.
fn end_outcome(state: &str, reason: Option<&str>, ran: bool) -> Option<Outcome> {
    Some(match state {
        "COMPLETED" => Outcome::Completed,
        // The batch shell could not be started or was killed by something other than the
        // script (slurmstepd gives JobLaunchFailure), or the job never got a node: sbatch
        // refusing a request (`BadConstraints`) still leaves a FAILED record with an id behind.
        // Slurm's side, not the grade's.
        "FAILED" if reason == Some("JobLaunchFailure") || !ran => Outcome::LaunchFailed,
        "FAILED" | "OUT_OF_MEMORY" => Outcome::Failed,
        "CANCELLED" | "REVOKED" => Outcome::Cancelled,
        "TIMEOUT" | "DEADLINE" => Outcome::TimedOut,
        "NODE_FAIL" => Outcome::NodeFail,
        "PREEMPTED" => Outcome::Preempted,
        "BOOT_FAIL" => Outcome::LaunchFailed,
        _ => return None,
    })
}

/// `status:signal` in words: `exit status 3`, `killed by signal 15 (SIGTERM)`.
pub fn exit_words(exit_code: &str) -> String {
    let (status, signal) = exit_code.split_once(':').unwrap_or((exit_code, "0"));
    match signal.parse::<i32>() {
        Ok(sig) if sig != 0 => {
            let name = match sig {
                1 => " (SIGHUP)",
                2 => " (SIGINT)",
                6 => " (SIGABRT)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            format!("killed by signal {sig}{name}")
        }
        _ => format!("exit status {status}"),
    }
}

/// How the engine ended a run, in words, for [`RemoteState::Ended`]'s `detail`.
fn ended_detail(
    state: &str,
    reason: Option<&str>,
    exit_code: &str,
    node: Option<&str>,
    restarts: u32,
) -> String {
    let mut out = format!("Slurm job {state}");
    if let Some(reason) = reason {
        out.push_str(&format!(" (reason {reason})"));
    }
    out.push_str(&format!(", {}", exit_words(exit_code)));
    if let Some(node) = node {
        out.push_str(&format!(", on {node}"));
    }
    if restarts > 0 {
        let s = if restarts == 1 { "" } else { "s" };
        out.push_str(&format!(", after {restarts} requeue{s}"));
    }
    out
}

/// Why run number `restarts` was lost, from its job-completion line: the line's state first
/// (`NODE_FAIL`, `PREEMPTED`, or `PENDING` for an `scontrol requeue`), so callers can match on
/// the word. When the line is not written yet (it appears 1–2 s after the run ends) or there is
/// no log, the live record's reason stands in.
fn requeue_reason(restarts: u32, runs: &[CompRun], live_reason: Option<&str>) -> String {
    let lost = usize::try_from(restarts).unwrap_or(usize::MAX);
    match runs.last() {
        Some(run) if lost > 0 && runs.len() >= lost => {
            let node = run
                .node
                .as_deref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default();
            let words = match run.state.as_str() {
                "NODE_FAIL" => ": the node was lost",
                "PREEMPTED" => ": preempted by a higher-priority job",
                "PENDING" | "REQUEUED" => ": requeued by hand (scontrol requeue)",
                _ => "",
            };
            format!("{}{node}{words}", run.state)
        }
        _ => format!(
            "unknown: no job-completion record for run {restarts} yet (Slurm reason: {})",
            live_reason.unwrap_or("None")
        ),
    }
}

/// What the live record and the job-completion log say about one submission together.
///
/// | live `JobState` | result |
/// |---|---|
/// | `PENDING`, `Restarts` > 0 | `Requeued { restarts, reason }`, reason from the lost run's jobcomp state |
/// | `REQUEUED`, `REQUEUE_HOLD`, `REQUEUE_FED`, `SPECIAL_EXIT` | `Requeued` |
/// | `PENDING`, `RESV_DEL_HOLD` | `Queued` |
/// | `RUNNING`, `CONFIGURING`, `COMPLETING`, `SUSPENDED`, … | `Running { node }` |
/// | `COMPLETED` | `Ended Completed` |
/// | `FAILED` (reason `JobLaunchFailure` or never on a node → `LaunchFailed`), `OUT_OF_MEMORY` | `Ended Failed` |
/// | `CANCELLED` | `Ended Cancelled` |
/// | `TIMEOUT`, `DEADLINE` | `Ended TimedOut` |
/// | `NODE_FAIL` / `PREEMPTED` / `BOOT_FAIL` | `Ended NodeFail` / `Preempted` / `LaunchFailed` |
/// | no live record (purged) | the last jobcomp run's end state, else `Unknown` |
///
/// A live state this table does not name is taken as still running: the job exists, and
/// calling it ended or unknown could make the server dispatch a second run beside it.
pub fn remote_state(live: Option<LiveJob>, runs: &[CompRun]) -> RemoteState {
    let Some(job) = live else {
        let Some(run) = runs.last() else {
            return RemoteState::Unknown;
        };
        return match end_outcome(&run.state, None, run.node.is_some()) {
            Some(outcome) => {
                let lost = u32::try_from(runs.len() - 1).unwrap_or(u32::MAX);
                let detail =
                    ended_detail(&run.state, None, &run.exit_code, run.node.as_deref(), lost);
                RemoteState::Ended {
                    outcome,
                    detail: format!(
                        "{detail} (from the job-completion log; the live record is gone)"
                    ),
                }
            }
            None => RemoteState::Unknown,
        };
    };
    let reason = job.reason.as_deref();
    match job.state.as_str() {
        "PENDING" if job.restarts > 0 => RemoteState::Requeued {
            restarts: job.restarts,
            reason: requeue_reason(job.restarts, runs, reason),
        },
        "PENDING" | "RESV_DEL_HOLD" => RemoteState::Queued,
        "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "SPECIAL_EXIT" => {
            let restarts = job.restarts.max(1);
            let mut why = requeue_reason(restarts, runs, reason);
            if job.state != "REQUEUED" {
                why.push_str(&format!(" ({}: held until released)", job.state));
            }
            RemoteState::Requeued {
                restarts,
                reason: why,
            }
        }
        state => match end_outcome(state, reason, job.node.is_some()) {
            Some(outcome) => RemoteState::Ended {
                outcome,
                detail: ended_detail(
                    state,
                    reason,
                    &job.exit_code,
                    job.node.as_deref(),
                    job.restarts,
                ),
            },
            None => RemoteState::Running { node: job.node },
        },
    }
}

/// Which sbatch failures are the request's fault (retrying cannot help). Matched
/// case-insensitively against stderr.
const REJECTED: &[&str] = &[
    "requested node configuration is not available",
    "invalid generic resource",
    "memory specification can not be satisfied",
    "invalid partition",
    "requested partition configuration not available",
    "invalid account",
    "invalid qos",
    "invalid wckey",
    "invalid feature specification",
    "invalid time limit",
    "requested time limit is invalid",
    "invalid job array",
    "node count specification invalid",
    "job violates accounting/qos policy",
    "access/permission denied",
    "unrecognized option",
    "invalid option",
    "invalid argument",
];

/// Failures that say nothing about the request: the controller, munge, the connection or the
/// `command_prefix` transport (docker, ssh) did not answer. Checked before [`REJECTED`]: sbatch
/// says "Batch job submission failed: Unable to contact slurm controller".
const TRANSIENT: &[&str] = &[
    "unable to contact slurm controller",
    "socket timed out",
    "temporarily unable",
    "temporarily unavailable",
    "zero bytes were transmitted",
    "connection refused",
    "connection reset",
    "communication connection failure",
    "slurmctld is busy",
    "backup controller in standby",
    "munge",
    // Submit limits lift as jobs end.
    "maxsubmitjob",
    "too many pending jobs",
    // docker exec / ssh: the transport, not Slurm.
    "no such container",
    "is not running",
    "cannot connect to the docker daemon",
    "could not resolve hostname",
    "connection timed out",
];

/// Classifies a Slurm CLI failure. `command` is the command line as run (with its prefix),
/// `rc` its exit status (`None`: killed by a signal). `submitting` marks sbatch: its refusals
/// ("Batch job submission failed: …", or rc 255 for options it could not parse) are
/// [`BackendError::Rejected`]; anything unrecognised, and every read that failed, is
/// [`BackendError::Transient`], so the server asks again later rather than fail a grade on a
/// message we have not seen.
pub fn classify_failure(
    command: &str,
    rc: Option<i32>,
    stderr: &str,
    submitting: bool,
) -> BackendError {
    let status = rc.map_or_else(
        || "was killed by a signal".to_owned(),
        |rc| format!("exited {rc}"),
    );
    let text = stderr.trim();
    let message = if text.is_empty() {
        format!("`{command}` {status} and printed nothing on stderr")
    } else {
        format!("`{command}` {status}: {text}")
    };
    let lower = text.to_ascii_lowercase();
    if TRANSIENT.iter().any(|p| lower.contains(p)) {
        return BackendError::Transient(message);
    }
    let refused = REJECTED.iter().any(|p| lower.contains(p))
        || (submitting && (rc == Some(255) || lower.contains("batch job submission failed")));
    if refused {
        BackendError::Rejected(message)
    } else {
        BackendError::Transient(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real `scontrol show job -o` output from the test cluster (Slurm 22.05.8), trimmed.
    const COMPLETED: &str = "JobId=1 JobName=infradev-7-1 UserId=root(0) GroupId=root(0) \
        MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=COMPLETED \
        Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 \
        RunTime=00:00:00 TimeLimit=UNLIMITED AllocNode:Sid=ctl:36 NodeList=node1 BatchHost=node1 \
        NumNodes=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* Features=(null) \
        Command=/tmp/x/probe.sh 172.19.0.1 JobState=FAILED WorkDir=/tmp/x \
        Comment=infradev job 7 Restarts=9 StdErr=/tmp/x/p-1.out TresPerNode=gres:gpu:1\n";

    fn live(
        state: &str,
        reason: Option<&str>,
        restarts: u32,
        node: Option<&str>,
        ec: &str,
    ) -> LiveJob {
        LiveJob {
            job_id: "5".into(),
            name: Some("infradev-1-1".into()),
            state: state.into(),
            reason: reason.map(Into::into),
            restarts,
            node: node.map(Into::into),
            exit_code: ec.into(),
            requeue: true,
        }
    }

    fn run(state: &str, ec: &str, node: &str) -> CompRun {
        CompRun {
            job_id: "5".into(),
            state: state.into(),
            exit_code: ec.into(),
            node: Some(node.into()),
        }
    }

    #[test]
    fn scontrol_fields_with_spaces_and_first_wins() {
        let job = parse_scontrol_job(COMPLETED, "1").unwrap();
        assert_eq!(
            job,
            LiveJob {
                job_id: "1".into(),
                name: Some("infradev-7-1".into()),
                state: "COMPLETED".into(),
                reason: None,
                restarts: 0,
                node: Some("node1".into()),
                exit_code: "0:0".into(),
                requeue: true,
            }
        );
        let f = fields(COMPLETED);
        let get = |k: &str| f.iter().find(|(key, _)| *key == k).unwrap().1.clone();
        assert_eq!(get("Command"), "/tmp/x/probe.sh 172.19.0.1");
        assert_eq!(get("Comment"), "infradev job 7");
        assert_eq!(get("AllocNode:Sid"), "ctl:36");
    }

    #[test]
    fn scontrol_pending_requeued() {
        let out = "JobId=12 JobName=infradev-3-1 JobState=PENDING Reason=BeginTime Dependency=(null) \
                   Requeue=1 Restarts=1 BatchFlag=1 ExitCode=0:0 NodeList=(null) BatchHost=node2";
        let job = parse_scontrol_job(out, "12").unwrap();
        assert_eq!(job.state, "PENDING");
        assert_eq!(job.reason.as_deref(), Some("BeginTime"));
        assert_eq!(job.restarts, 1);
        assert_eq!(job.node, None);
    }

    #[test]
    fn scontrol_errors_name_the_problem() {
        assert!(
            parse_scontrol_job("", "3")
                .unwrap_err()
                .contains("no JobId=3")
        );
        assert!(
            parse_scontrol_job("JobId=3 Reason=None", "3")
                .unwrap_err()
                .contains("JobState")
        );
        assert!(
            parse_scontrol_job("JobId=3 JobState=RUNNING Restarts=x", "3")
                .unwrap_err()
                .contains("Restarts")
        );
        // A longer id that starts the same is another job.
        assert!(parse_scontrol_job("JobId=33 JobState=RUNNING", "3").is_err());
    }

    #[test]
    fn sacct_runs() {
        let out = "4|NODE_FAIL|0:0|node2\n4|COMPLETED|0:0|node1\n44|FAILED|1:0|node1\n4.batch|COMPLETED|0:0|node1\nbad line\n\n6|CANCELLED by 0|0:15|None assigned\n";
        assert_eq!(
            parse_sacct_runs(out, "4"),
            vec![
                CompRun {
                    job_id: "4".into(),
                    state: "NODE_FAIL".into(),
                    exit_code: "0:0".into(),
                    node: Some("node2".into())
                },
                CompRun {
                    job_id: "4".into(),
                    state: "COMPLETED".into(),
                    exit_code: "0:0".into(),
                    node: Some("node1".into())
                },
            ]
        );
        let six = parse_sacct_runs(out, "6");
        assert_eq!(six[0].state, "CANCELLED");
        assert_eq!(six[0].node, None);
    }

    #[test]
    fn remote_state_table() {
        use Outcome::*;
        let ended = |o: Outcome| move |s: &RemoteState| matches!(s, RemoteState::Ended { outcome, .. } if *outcome == o);
        type Check = Box<dyn Fn(&RemoteState) -> bool>;
        let cases: Vec<(&str, Option<LiveJob>, Vec<CompRun>, Check)> = vec![
            (
                "pending",
                Some(live("PENDING", Some("Resources"), 0, None, "0:0")),
                vec![],
                Box::new(|s| *s == RemoteState::Queued),
            ),
            (
                "held reservation",
                Some(live("RESV_DEL_HOLD", None, 0, None, "0:0")),
                vec![],
                Box::new(|s| *s == RemoteState::Queued),
            ),
            (
                "running",
                Some(live("RUNNING", None, 0, Some("node2"), "0:0")),
                vec![],
                Box::new(|s| {
                    *s == RemoteState::Running {
                        node: Some("node2".into()),
                    }
                }),
            ),
            (
                "configuring",
                Some(live("CONFIGURING", None, 0, Some("node1"), "0:0")),
                vec![],
                Box::new(|s| matches!(s, RemoteState::Running { .. })),
            ),
            (
                "completing",
                Some(live("COMPLETING", None, 0, Some("node1"), "0:0")),
                vec![],
                Box::new(|s| matches!(s, RemoteState::Running { .. })),
            ),
            (
                "unheard-of state",
                Some(live("WARPING", None, 0, Some("node1"), "0:0")),
                vec![],
                Box::new(|s| matches!(s, RemoteState::Running { .. })),
            ),
            (
                "completed",
                Some(live("COMPLETED", None, 0, Some("node1"), "0:0")),
                vec![],
                Box::new(ended(Completed)),
            ),
            (
                "failed",
                Some(live(
                    "FAILED",
                    Some("NonZeroExitCode"),
                    0,
                    Some("node1"),
                    "3:0",
                )),
                vec![],
                Box::new(ended(Failed)),
            ),
            (
                "launch failure",
                Some(live(
                    "FAILED",
                    Some("JobLaunchFailure"),
                    0,
                    Some("node1"),
                    "0:53",
                )),
                vec![],
                Box::new(ended(LaunchFailed)),
            ),
            (
                "refused at submission",
                Some(live("FAILED", Some("BadConstraints"), 0, None, "0:1")),
                vec![],
                Box::new(ended(LaunchFailed)),
            ),
            (
                "purged, refused at submission",
                None,
                vec![CompRun {
                    job_id: "5".into(),
                    state: "FAILED".into(),
                    exit_code: "0:1".into(),
                    node: None,
                }],
                Box::new(ended(LaunchFailed)),
            ),
            (
                "oom",
                Some(live(
                    "OUT_OF_MEMORY",
                    Some("OutOfMemory"),
                    0,
                    Some("node1"),
                    "0:125",
                )),
                vec![],
                Box::new(ended(Failed)),
            ),
            (
                "cancelled",
                Some(live("CANCELLED", None, 0, Some("node1"), "0:15")),
                vec![],
                Box::new(ended(Cancelled)),
            ),
            (
                "timeout",
                Some(live("TIMEOUT", Some("TimeLimit"), 0, Some("node1"), "0:15")),
                vec![],
                Box::new(ended(TimedOut)),
            ),
            (
                "deadline",
                Some(live("DEADLINE", None, 0, None, "0:0")),
                vec![],
                Box::new(ended(TimedOut)),
            ),
            (
                "node fail",
                Some(live("NODE_FAIL", Some("NodeDown"), 0, Some("node2"), "0:0")),
                vec![],
                Box::new(ended(NodeFail)),
            ),
            (
                "preempted",
                Some(live("PREEMPTED", None, 0, Some("node2"), "0:0")),
                vec![],
                Box::new(ended(Preempted)),
            ),
            (
                "boot fail",
                Some(live("BOOT_FAIL", None, 0, Some("node2"), "0:0")),
                vec![],
                Box::new(ended(LaunchFailed)),
            ),
            (
                "requeued after node loss",
                Some(live("PENDING", Some("BeginTime"), 1, None, "0:0")),
                vec![run("NODE_FAIL", "0:0", "node2")],
                Box::new(|s| {
                    matches!(s, RemoteState::Requeued { restarts: 1, reason }
                    if reason.starts_with("NODE_FAIL on node2"))
                }),
            ),
            (
                "requeued after preemption",
                Some(live("PENDING", Some("BeginTime"), 1, None, "0:0")),
                vec![run("PREEMPTED", "0:0", "node1")],
                Box::new(|s| {
                    matches!(s, RemoteState::Requeued { restarts: 1, reason }
                    if reason.starts_with("PREEMPTED"))
                }),
            ),
            (
                "requeued by hand",
                Some(live("PENDING", Some("BeginTime"), 2, None, "0:0")),
                vec![
                    run("NODE_FAIL", "0:0", "node2"),
                    run("PENDING", "0:0", "node1"),
                ],
                Box::new(|s| {
                    matches!(s, RemoteState::Requeued { restarts: 2, reason }
                    if reason.starts_with("PENDING") && reason.contains("by hand"))
                }),
            ),
            (
                "requeued, log line not written yet",
                Some(live("PENDING", Some("BeginTime"), 2, None, "0:0")),
                vec![run("NODE_FAIL", "0:0", "node2")],
                Box::new(|s| {
                    matches!(s, RemoteState::Requeued { restarts: 2, reason }
                    if reason.starts_with("unknown") && reason.contains("BeginTime"))
                }),
            ),
            (
                "requeue hold",
                Some(live("REQUEUE_HOLD", Some("JobHeldAdmin"), 1, None, "0:0")),
                vec![run("NODE_FAIL", "0:0", "node2")],
                Box::new(|s| {
                    matches!(s, RemoteState::Requeued { restarts: 1, reason }
                    if reason.contains("NODE_FAIL") && reason.contains("held"))
                }),
            ),
            (
                "rerun completed after a requeue",
                Some(live("COMPLETED", None, 1, Some("node1"), "0:0")),
                vec![
                    run("NODE_FAIL", "0:0", "node2"),
                    run("COMPLETED", "0:0", "node1"),
                ],
                Box::new(ended(Completed)),
            ),
            (
                "purged, completed",
                None,
                vec![run("COMPLETED", "0:0", "node1")],
                Box::new(ended(Completed)),
            ),
            (
                "purged, node fail without requeue",
                None,
                vec![run("NODE_FAIL", "0:0", "node2")],
                Box::new(ended(NodeFail)),
            ),
            (
                "purged, cancelled",
                None,
                vec![run("CANCELLED", "0:0", "node2")],
                Box::new(ended(Cancelled)),
            ),
            (
                "purged, no log",
                None,
                vec![],
                Box::new(|s| *s == RemoteState::Unknown),
            ),
            (
                "purged, last line not an end",
                None,
                vec![run("PENDING", "0:0", "node1")],
                Box::new(|s| *s == RemoteState::Unknown),
            ),
        ];
        for (name, live, runs, check) in cases {
            let state = remote_state(live, &runs);
            assert!(check(&state), "{name}: got {state:?}");
        }
    }

    #[test]
    fn details_in_words() {
        let s = remote_state(
            Some(live(
                "FAILED",
                Some("NonZeroExitCode"),
                1,
                Some("node1"),
                "3:0",
            )),
            &[],
        );
        assert_eq!(
            s,
            RemoteState::Ended {
                outcome: Outcome::Failed,
                detail: "Slurm job FAILED (reason NonZeroExitCode), exit status 3, on node1, after 1 requeue".into()
            }
        );
        let s = remote_state(Some(live("CANCELLED", None, 0, Some("node2"), "0:15")), &[]);
        let RemoteState::Ended { detail, .. } = s else {
            panic!("{s:?}")
        };
        assert_eq!(
            detail,
            "Slurm job CANCELLED, killed by signal 15 (SIGTERM), on node2"
        );
        let s = remote_state(
            None,
            &[
                run("NODE_FAIL", "0:0", "node2"),
                run("TIMEOUT", "0:0", "node1"),
            ],
        );
        let RemoteState::Ended { outcome, detail } = s else {
            panic!("{s:?}")
        };
        assert_eq!(outcome, Outcome::TimedOut);
        assert!(
            detail.contains("TIMEOUT")
                && detail.contains("after 1 requeue")
                && detail.contains("job-completion log"),
            "{detail}"
        );
    }

    #[test]
    fn exit_words_table() {
        assert_eq!(exit_words("0:0"), "exit status 0");
        assert_eq!(exit_words("3:0"), "exit status 3");
        assert_eq!(exit_words("0:9"), "killed by signal 9 (SIGKILL)");
        assert_eq!(exit_words("0:53"), "killed by signal 53");
        assert_eq!(exit_words("junk"), "exit status junk");
    }

    #[test]
    fn classify_table() {
        let rejected = |e: &BackendError| matches!(e, BackendError::Rejected(_));
        let cases: [(Option<i32>, &str, bool, bool); 12] = [
            (
                Some(1),
                "sbatch: error: Batch job submission failed: Requested node configuration is not available",
                true,
                true,
            ),
            (
                Some(1),
                "sbatch: error: Invalid generic resource (gres) specification",
                true,
                true,
            ),
            (
                Some(1),
                "sbatch: error: Memory specification can not be satisfied\nsbatch: error: Batch job submission failed: Requested node configuration is not available",
                true,
                true,
            ),
            (
                Some(1),
                "sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid partition name specified",
                true,
                true,
            ),
            (
                Some(255),
                "sbatch: error: Invalid --time specification",
                true,
                true,
            ),
            (
                Some(1),
                "sbatch: error: Batch job submission failed: Something new",
                true,
                true,
            ),
            (
                Some(1),
                "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
                true,
                false,
            ),
            (
                Some(1),
                "sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)",
                true,
                false,
            ),
            (
                Some(1),
                "Error: No such container: infradev-slurm-ctl",
                true,
                false,
            ),
            (
                Some(8),
                "scancel: error: Kill job error on job id 5: Unable to contact slurm controller (connect failure)",
                false,
                false,
            ),
            (Some(1), "squeue: error: something odd", false, false),
            (None, "", true, false),
        ];
        for (rc, stderr, submitting, want_rejected) in cases {
            let e = classify_failure("sbatch --parsable", rc, stderr, submitting);
            assert_eq!(rejected(&e), want_rejected, "{stderr:?} -> {e:?}");
            assert!(e.to_string().contains("sbatch --parsable"), "{e}");
        }
        let e = classify_failure(
            "docker exec -i c sbatch --parsable",
            Some(1),
            "sbatch: error: x\n",
            true,
        );
        assert_eq!(
            e.to_string(),
            "`docker exec -i c sbatch --parsable` exited 1: sbatch: error: x"
        );
        let e = classify_failure("scancel 5", None, "", false);
        assert_eq!(
            e.to_string(),
            "`scancel 5` was killed by a signal and printed nothing on stderr"
        );
    }

    #[test]
    fn unknown_job_message() {
        assert!(is_unknown_job(
            "slurm_load_jobs error: Invalid job id specified\n"
        ));
        assert!(!is_unknown_job(
            "slurm_load_jobs error: Unable to contact slurm controller"
        ));
    }
}
