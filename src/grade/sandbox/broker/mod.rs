//! The broker of the two-sandbox probe phase (docs/probe-protocol.md).
//!
//! The judge (probes, our library, pytest) and the subject (the submission behind a call
//! server) each reach the grader through their own Unix socket and nothing else. The broker
//! relays every call, measures the subject from outside (time per call, memory from its
//! cgroup, bytes on its network namespace), enforces per-call and per-test deadlines,
//! replaces a subject that died, and is the only writer of the phase's results.

mod budget;
mod frame;
mod meter;
mod ranks;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};

use budget::{breach, budget_for, coarse};
pub use frame::{FrameError, read_frame, read_raw, write_frame};
pub use meter::{MemorySource, Meter, Usage};
pub use ranks::{MAX_WORLD_SIZE, MIN_WORLD_SIZE, RankAddress, rank_socket_dir};

use crate::grade::results::{Event, PhaseResults};
use crate::grading::{BudgetBreach, BudgetKind, Kill};
use crate::task::Budget;

/// Frames from the judge (requests may carry tensors).
const MAX_JUDGE_FRAME: usize = 64 << 20;
/// How long a connection may take to send its hello once accepted.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// A hello is small.
const MAX_HELLO: usize = 4096;
/// The socket file names, each in a directory of its own.
pub const JUDGE_SOCKET: &str = "judge.sock";
pub const SUBJECT_SOCKET: &str = "subject.sock";

/// The subject sandboxes of one probe phase, started and stopped by the broker.
pub trait SubjectHost: Send {
    /// Starts subject number `generation`, which will connect to the subject socket.
    fn start(&mut self, generation: u32) -> impl Future<Output = Result<(), String>> + Send;
    /// A meter for the subject that is running now.
    fn meter(&mut self) -> impl Future<Output = Meter> + Send;
    /// Stops the running subject (if any) and says whether the kernel's OOM killer ended it.
    fn stop(&mut self) -> impl Future<Output = SubjectEnd> + Send;
    /// Starts rank group `group`: one subject sandbox per rank, rank `r` connecting to the
    /// subject socket in `socket_dirs[r]`, all joined by a network of their own (and nothing
    /// else). Returns where rank 0 can be reached.
    fn start_ranks(
        &mut self,
        group: u32,
        socket_dirs: &[PathBuf],
    ) -> impl Future<Output = Result<RankAddress, String>> + Send;
    /// A meter per rank of the running group, in rank order.
    fn rank_meters(&mut self) -> impl Future<Output = Vec<Meter>> + Send;
    /// Stops every rank of the running group (if any) and removes its network.
    fn stop_ranks(&mut self) -> impl Future<Output = Vec<SubjectEnd>> + Send;
}

/// How a subject ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubjectEnd {
    pub oom_killed: bool,
}

/// What the broker enforces.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// Budgets by probe node id (a key without `[params]` covers every case).
    pub budgets: Vec<(String, Budget)>,
    /// The longest one call may take (the task's `test_timeout_s`).
    pub call_timeout: Duration,
    /// How long a sandbox may take to say hello.
    pub startup_timeout: Duration,
    /// The largest reply the subject may send.
    pub max_reply: usize,
    /// Counts the results recorded so far (live progress).
    pub progress: Option<std::sync::Arc<std::sync::atomic::AtomicUsize>>,
}

/// What the probe phase produced, as the broker saw it.
#[derive(Debug, Default)]
pub struct Brokered {
    pub results: PhaseResults,
    /// A fault of ours: a sandbox that never came up, a subject that could not be replaced.
    pub infra_error: Option<String>,
    pub calls: u64,
    /// How many subjects were started (1 + replacements after faults).
    pub subjects: u32,
    /// How many rank groups were started.
    pub rank_groups: u32,
}

/// Both listening sockets of one probe phase.
pub struct Broker {
    judge: UnixListener,
    subject: UnixListener,
    subject_path: PathBuf,
    /// Where the rank groups' socket directories are made.
    rank_root: PathBuf,
}

impl Broker {
    /// Binds `judge.sock` in `judge_dir` and `subject.sock` in `subject_dir` (two directories,
    /// each mounted into one sandbox only), connectable by the sandbox user.
    pub fn bind(judge_dir: &Path, subject_dir: &Path) -> std::io::Result<Broker> {
        let subject_path = subject_dir.join(SUBJECT_SOCKET);
        Ok(Broker {
            judge: listen(&judge_dir.join(JUDGE_SOCKET))?,
            subject: listen(&subject_path)?,
            subject_path,
            rank_root: subject_dir.parent().unwrap_or(subject_dir).to_path_buf(),
        })
    }

    /// Serves the phase until the judge hangs up or `judge_exited` resolves.
    pub async fn serve<H: SubjectHost>(
        self,
        host: &mut H,
        cfg: &BrokerConfig,
        judge_exited: impl Future<Output = ()>,
    ) -> Brokered {
        let mut session = Session {
            listener: self.subject,
            listener_path: self.subject_path,
            host,
            cfg,
            subject: None,
            generation: 0,
            out: Brokered::default(),
            test: None,
            group: None,
            groups: 0,
            rank_root: self.rank_root,
        };
        tokio::pin!(judge_exited);
        // The first subject comes up while the judge starts; its hello is the infra boundary.
        if let Err(e) = session.replace_subject().await {
            session.out.infra_error = Some(e);
        }
        let judge = tokio::select! {
            j = tokio::time::timeout(cfg.startup_timeout, self.judge.accept()) => j,
            _ = &mut judge_exited => {
                session.fail_infra("the judge sandbox exited before it connected");
                return session.finish().await;
            }
        };
        let (mut jr, mut jw) = match judge {
            Ok(Ok((stream, _))) => stream.into_split(),
            Ok(Err(e)) => {
                session.fail_infra(&format!("cannot accept the judge's connection: {e}"));
                return session.finish().await;
            }
            Err(_) => {
                session.fail_infra("the judge sandbox did not connect in time");
                return session.finish().await;
            }
        };
        loop {
            let raw = tokio::select! {
                f = read_raw(&mut jr, MAX_JUDGE_FRAME) => f,
                _ = &mut judge_exited => break,
            };
            let frame = match raw
                .as_deref()
                .map_err(Clone::clone)
                .and_then(frame::parse_object)
            {
                Ok(f) => f,
                Err(FrameError::Closed) => break,
                Err(e) => {
                    session.fail_infra(&format!("the judge broke the protocol: {e}"));
                    break;
                }
            };
            let raw = raw.unwrap_or_default();
            let reply = match frame.get("op").and_then(Value::as_str) {
                Some("hello") => {
                    session.out.results.mark_ready();
                    Some(match (&session.subject, &session.out.infra_error) {
                        (Some(s), _) => json!({"op": "welcome", "generation": s.generation}),
                        _ => {
                            json!({"op": "welcome", "generation": null, "fault": "subject_unavailable"})
                        }
                    })
                }
                Some("call") if frame.get("rank").is_some() => {
                    Some(session.rank_call(&frame).await)
                }
                Some("call_ranks") => Some(session.call_ranks(&frame).await),
                Some("ranks") => Some(session.ranks_op(&frame).await),
                Some("call") => match session.call(&frame, &raw, &mut jr, &mut jw).await {
                    Reply::Raw(bytes) => {
                        if frame::write_raw(&mut jw, &bytes).await.is_err() {
                            break;
                        }
                        None
                    }
                    Reply::Value(v) => Some(v),
                },
                Some("event") => {
                    session
                        .event(frame.get("event").cloned().unwrap_or(Value::Null))
                        .await
                }
                _ => None,
            };
            if let Some(reply) = reply
                && write_frame(&mut jw, &reply).await.is_err()
            {
                break;
            }
        }
        session.finish().await
    }
}

fn listen(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    // The sandbox user is not us; connecting needs write permission on the socket.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// Inside a callback: sends the subject's frame to the judge and relays the judge's answer
/// (a callback result, or a nested call whose id is pushed on `pending`) to the subject.
async fn through_judge(
    raw: &[u8],
    jr: &mut OwnedReadHalf,
    jw: &mut OwnedWriteHalf,
    subject: &mut OwnedWriteHalf,
    pending: &mut Vec<Value>,
) -> Result<(), Fault> {
    frame::write_raw(jw, raw)
        .await
        .map_err(|_| Fault::Protocol)?;
    let answer = read_frame(jr, MAX_JUDGE_FRAME)
        .await
        .map_err(|_| Fault::Protocol)?;
    if answer.get("op").and_then(Value::as_str) == Some("call") {
        pending.push(answer.get("id").cloned().unwrap_or(Value::Null));
    }
    write_frame(subject, &answer).await.map_err(|_| Fault::Died)
}

/// Waits for a subject's hello on `listener` and welcomes it. Connections that do not say
/// hello are dropped (a submission can open as many as it likes).
async fn accept_subject(
    listener: &UnixListener,
    timeout: Duration,
    welcome: Value,
) -> Result<(OwnedReadHalf, OwnedWriteHalf), String> {
    tokio::time::timeout(timeout, async {
        loop {
            let (stream, _) = listener
                .accept()
                .await
                .map_err(|e| format!("cannot accept the subject's connection: {e}"))?;
            let (mut reader, mut writer) = stream.into_split();
            let hello =
                tokio::time::timeout(HELLO_TIMEOUT, read_frame(&mut reader, MAX_HELLO)).await;
            if !matches!(&hello, Ok(Ok(h)) if h.get("op").and_then(Value::as_str) == Some("hello"))
            {
                continue; // not our server's connection: the next one may be
            }
            if write_frame(&mut writer, &welcome).await.is_ok() {
                return Ok((reader, writer));
            }
        }
    })
    .await
    .map_err(|_| "the subject sandbox did not say hello in time".to_owned())?
}

struct SubjectConn {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    generation: u32,
    meter: Meter,
}

/// The test in flight and what it has used so far.
struct TestRun {
    nodeid: String,
    budget: Option<Budget>,
    baseline: meter::Baseline,
    subject_time: Duration,
    /// Set by the broker when the subject died or ran out of time in this test.
    kill: Option<Kill>,
    breach: Option<BudgetBreach>,
    /// What each rank of the test's rank groups used.
    ranks: Vec<ranks::RankUsage>,
}

struct Session<'a, H: SubjectHost> {
    listener: UnixListener,
    listener_path: PathBuf,
    host: &'a mut H,
    cfg: &'a BrokerConfig,
    subject: Option<SubjectConn>,
    generation: u32,
    out: Brokered,
    test: Option<TestRun>,
    group: Option<ranks::Group>,
    /// Rank groups started so far.
    groups: u32,
    rank_root: PathBuf,
}

/// The judge's answer to a call: the subject's reply as sent, or one we composed.
enum Reply {
    Raw(Vec<u8>),
    Value(Value),
}

/// Why a call did not get its reply.
enum Fault {
    Timeout,
    Budget,
    Died,
    Protocol,
}

impl<H: SubjectHost> Session<'_, H> {
    fn fail_infra(&mut self, why: &str) {
        if self.out.infra_error.is_none() {
            self.out.infra_error = Some(why.to_owned());
        }
    }

    async fn finish(mut self) -> Brokered {
        self.stop_group().await;
        if self.subject.take().is_some() || self.generation > 0 {
            self.host.stop().await;
        }
        self.out
    }

    /// Stops the current subject (if any) and starts the next generation; waits for its hello.
    async fn replace_subject(&mut self) -> Result<(), String> {
        if self.subject.take().is_some() {
            self.host.stop().await;
        }
        self.generation += 1;
        let generation = self.generation;
        self.out.subjects = generation;
        // A listener of its own for each subject: connections an earlier subject left queued
        // (a submission can open as many as it likes) die with the old listener.
        if generation > 1 {
            self.listener = listen(&self.listener_path)
                .map_err(|e| format!("cannot listen on the subject's socket: {e}"))?;
        }
        self.host.start(generation).await?;
        let welcome = json!({"op": "welcome", "generation": generation});
        let accepted = accept_subject(&self.listener, self.cfg.startup_timeout, welcome).await;
        let (reader, writer) = match accepted {
            Ok(rw) => rw,
            Err(e) => {
                self.host.stop().await;
                return Err(e);
            }
        };
        let meter = self.host.meter().await;
        self.subject = Some(SubjectConn {
            reader,
            writer,
            generation,
            meter,
        });
        Ok(())
    }

    /// Relays one judge call (and any callbacks it causes) and returns the judge's reply.
    /// The judge's frame goes to the subject as it is (the subject ignores `op`); the reply
    /// comes back as the subject sent it, after its checks, with `subject_ns` added.
    async fn call(
        &mut self,
        frame: &Value,
        raw: &[u8],
        jr: &mut OwnedReadHalf,
        jw: &mut OwnedWriteHalf,
    ) -> Reply {
        self.out.calls += 1;
        let id = frame.get("id").cloned().unwrap_or(Value::Null);
        if self.subject.is_none() {
            return Reply::Value(json!({"id": id, "fault": "crashed", "generation": null}));
        }
        let deadline = self.call_deadline();
        let max_reply = self.cfg.max_reply;
        let subject = self.subject.as_mut().expect("checked above");
        let mut pending = vec![id.clone()];
        let mut subject_time = Duration::ZERO;
        let outcome: Result<Vec<u8>, Fault> = async {
            frame::write_raw(&mut subject.writer, raw)
                .await
                .map_err(|_| Fault::Died)?;
            let over = || {
                if deadline.1 {
                    Fault::Budget
                } else {
                    Fault::Timeout
                }
            };
            loop {
                let left = deadline.0.checked_sub(subject_time).ok_or_else(over)?;
                let waited = Instant::now();
                let read =
                    tokio::time::timeout(left, read_raw(&mut subject.reader, max_reply)).await;
                subject_time += waited.elapsed();
                let raw = match read {
                    Err(_) => return Err(over()),
                    Ok(Err(FrameError::Closed | FrameError::Io(_))) => return Err(Fault::Died),
                    Ok(Err(_)) => return Err(Fault::Protocol),
                    Ok(Ok(raw)) => raw,
                };
                let reply = frame::parse_object(&raw).map_err(|_| Fault::Protocol)?;
                // Only the broker says `fault`, `subject_ns` or `generation`.
                if ["fault", "subject_ns", "generation"]
                    .iter()
                    .any(|k| reply.get(k).is_some())
                {
                    return Err(Fault::Protocol);
                }
                if reply.get("callback").is_some() {
                    // The subject called a judge callback: the judge answers (it may call the
                    // subject again meanwhile); its time is not the subject's.
                    through_judge(&raw, jr, jw, &mut subject.writer, &mut pending).await?;
                    continue;
                }
                let replied_to = reply.get("id").cloned().unwrap_or(Value::Null);
                if pending.last() != Some(&replied_to)
                    || (reply.get("ok").is_none() && reply.get("err").is_none())
                {
                    return Err(Fault::Protocol);
                }
                pending.pop();
                if pending.is_empty() {
                    return Ok(raw);
                }
                // A nested call's reply goes to the judge, which is inside a callback.
                through_judge(&raw, jr, jw, &mut subject.writer, &mut pending).await?;
            }
        }
        .await;
        if let Some(test) = &mut self.test {
            test.subject_time += subject_time;
            if let Some(s) = &mut self.subject {
                s.meter.sample(&mut test.baseline);
            }
        }
        match outcome {
            Ok(mut reply) => {
                // The reply is a JSON object (checked): add the broker's timing before its `}`.
                if let Some(end) = reply.iter().rposition(|b| *b == b'}') {
                    let field = format!(",\"subject_ns\":{}}}", subject_time.as_nanos() as u64);
                    reply.truncate(end);
                    reply.extend_from_slice(field.as_bytes());
                }
                Reply::Raw(reply)
            }
            Err(fault) => Reply::Value(self.fault(id, fault).await),
        }
    }

    /// The longest the next call may take, and whether that limit is a time budget.
    fn call_deadline(&self) -> (Duration, bool) {
        let cap = self.cfg.call_timeout;
        let Some(test) = &self.test else {
            return (cap, false);
        };
        match test.budget.as_ref().and_then(|b| b.wall_time_s) {
            Some(budget) => {
                let hard = Duration::from_secs_f64(2.0 * budget + 1.0);
                let left = hard.saturating_sub(test.subject_time);
                if left < cap {
                    (left, true)
                } else {
                    (cap, false)
                }
            }
            None => (cap, false),
        }
    }

    /// Ends the subject after a fault, records it against the test in flight, starts the
    /// next subject, and composes the judge's reply.
    async fn fault(&mut self, id: Value, fault: Fault) -> Value {
        let end = self.host.stop().await;
        self.subject = None;
        let name = self.record_fault(fault, end.oom_killed);
        let generation = match self.replace_subject().await {
            Ok(()) => json!(self.generation),
            Err(e) => {
                self.fail_infra(&format!("the subject sandbox could not be replaced: {e}"));
                Value::Null
            }
        };
        json!({"id": id, "fault": name, "generation": generation})
    }

    /// Records a fault against the test in flight; returns its name for the judge.
    fn record_fault(&mut self, fault: Fault, oom_killed: bool) -> &'static str {
        let (name, kill) = match fault {
            Fault::Timeout => ("timeout", Some(Kill::TimedOut)),
            Fault::Budget => ("budget", None),
            Fault::Died if oom_killed => ("oom", Some(Kill::OutOfMemory)),
            Fault::Died => ("crashed", Some(Kill::Crashed)),
            Fault::Protocol => ("protocol", Some(Kill::Crashed)),
        };
        if let Some(test) = &mut self.test {
            if matches!(fault, Fault::Budget) {
                let limit = test
                    .budget
                    .as_ref()
                    .and_then(|b| b.wall_time_s)
                    .unwrap_or(0.0);
                test.breach = Some(BudgetBreach {
                    kind: BudgetKind::Time,
                    measured: coarse(test.subject_time.as_secs_f64(), limit),
                    limit,
                });
            }
            test.kill = test.kill.or(kill);
        }
        name
    }

    /// Records a lifecycle event; `start` is answered once measurement is armed.
    async fn event(&mut self, event: Value) -> Option<Value> {
        let parsed: Event = serde_json::from_value(event).ok()?;
        let reply = match &parsed {
            Event::Start { nodeid } => {
                let budget = budget_for(&self.cfg.budgets, nodeid).cloned();
                let baseline = match &mut self.subject {
                    Some(s) => s.meter.begin(),
                    None => Default::default(),
                };
                self.test = Some(TestRun {
                    nodeid: nodeid.clone(),
                    budget,
                    baseline,
                    subject_time: Duration::ZERO,
                    kill: None,
                    breach: None,
                    ranks: Vec::new(),
                });
                self.begin_group_measurement();
                Some(json!({"op": "started", "nodeid": nodeid}))
            }
            _ => None,
        };
        let result_of = match &parsed {
            Event::Result { nodeid, .. } => Some(nodeid.clone()),
            _ => None,
        };
        self.out.results.apply(parsed);
        if let Some(p) = &self.cfg.progress {
            p.store(
                self.out.results.n_results(),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        if let Some(nodeid) = result_of
            && self.test.as_ref().is_some_and(|t| t.nodeid == nodeid)
        {
            // A group never outlives its test: its measurements close with it.
            self.stop_group().await;
            let test = self.test.take().expect("checked above");
            self.close_test(test);
        }
        reply
    }

    /// A test's own measurements against its budget; the broker's word beats the judge's.
    fn close_test(&mut self, mut test: TestRun) {
        let usage = match &mut self.subject {
            Some(s) => s.meter.end(&test.baseline),
            None => Usage::default(),
        };
        // A rank that vanished counts with its last reading (and its test failed for it);
        // only a live rank that cannot be read leaves a traffic budget unenforceable.
        let ranks = ranks::rank_traffic(&test.ranks);
        let traffic_budget = test
            .budget
            .as_ref()
            .is_some_and(|b| b.rank_bytes.is_some() || b.collective_bytes.is_some());
        if ranks.is_err() && traffic_budget {
            self.fail_infra("a live rank's traffic could not be measured for a traffic budget");
        }
        let usage = Usage {
            peak_memory_mb: test
                .ranks
                .iter()
                .filter_map(|r| r.usage.peak_memory_mb)
                .fold(usage.peak_memory_mb, |a, b| Some(a.map_or(b, |a| a.max(b)))),
            // The subject's bytes and every measured rank's; no figure when one is missing.
            sent_bytes: match ranks {
                Ok(Some((_, total))) => usage.sent_bytes.map(|s| s.saturating_add(total)),
                Ok(None) => usage.sent_bytes,
                Err(()) => None,
            },
        };
        let rank_max = ranks.ok().flatten().map(|(max, _)| max);
        // The exact figures stay in the operator's log (budgets are calibrated from it):
        // reports carry only the coarse bucket of a breach.
        tracing::debug!(
            test = %test.nodeid,
            subject_time_s = test.subject_time.as_secs_f64(),
            peak_memory_mb = ?usage.peak_memory_mb,
            sent_bytes = ?usage.sent_bytes,
            rank_max_bytes = ?rank_max,
            "probe measured"
        );
        if test.breach.is_none()
            && let Some(budget) = &test.budget
        {
            test.breach = breach(budget, test.subject_time, &usage, rank_max);
            if test.breach.is_none()
                && budget.peak_memory_mb.is_some()
                && usage.peak_memory_mb.is_none()
            {
                self.fail_infra("the subject's memory could not be measured for a memory budget");
            }
        }
        self.out
            .results
            .override_result(&test.nodeid, test.kill, test.breach);
    }
}

/// The socket directories of one probe phase, created private to it.
pub fn socket_dirs(phase_dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let judge = phase_dir.join("judge-socket");
    let subject = phase_dir.join("subject-socket");
    for d in [&judge, &subject] {
        std::fs::create_dir_all(d)?;
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok((judge, subject))
}

/// Connects to a socket (for tests and the local executor's readiness checks).
pub async fn connect(path: &Path) -> std::io::Result<UnixStream> {
    UnixStream::connect(path).await
}
