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
mod shape;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{UnixListener, UnixStream};

use budget::{breach, budget_for, coarse};
pub use frame::{FrameError, read_frame, read_raw, write_frame};
pub use meter::{MemorySource, Meter, Usage};
pub use ranks::{MAX_WORLD_SIZE, MIN_WORLD_SIZE, RankAddress, rank_socket_dir};
use shape::{Composed, JudgeFrame, Kind, SubjectReply};
pub use shape::{MAX_FRAME, MAX_FRAME_DEPTH, MAX_TO_JUDGE};

use crate::grade::results::{Event, PhaseResults};
use crate::grading::{BudgetBreach, BudgetKind, Kill};
use crate::task::Budget;

/// Frames from the judge (requests may carry tensors).
const MAX_JUDGE_FRAME: usize = MAX_FRAME;
/// The most callbacks one call may make (nested calls' included): past it, the subject broke
/// the protocol.
pub const MAX_CALLBACKS_PER_CALL: usize = 100_000;
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
    /// The most callbacks one call may make (`MAX_CALLBACKS_PER_CALL`).
    pub max_callbacks: usize,
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
            let raw = match raw {
                Ok(raw) => Arc::new(raw),
                Err(FrameError::Closed) => break,
                Err(e) => {
                    session.fail_infra(&format!("the judge broke the protocol: {e}"));
                    break;
                }
            };
            let (frame, callbacks) = match JudgeFrame::parse(&raw) {
                Ok(f) => f,
                Err(e) => {
                    session.fail_infra(&format!("the judge broke the protocol: {e}"));
                    break;
                }
            };
            let needs_id = matches!(frame.op.as_deref(), Some("call" | "call_ranks" | "ranks"));
            let id = match frame.id {
                Some(id) => id,
                None if needs_id => {
                    session.fail_infra("the judge broke the protocol: a request without an id");
                    break;
                }
                None => 0,
            };
            let reply = match frame.op.as_deref() {
                Some("hello") => {
                    session.out.results.mark_ready();
                    Reply::Value(match (&session.subject, &session.out.infra_error) {
                        (Some(s), _) => json!({"op": "welcome", "generation": s.generation}),
                        _ => {
                            json!({"op": "welcome", "generation": null, "fault": "subject_unavailable"})
                        }
                    })
                }
                Some("call") if frame.rank.is_some() => {
                    let req = frame.req.and_then(|r| shape::judge_payload(&raw, r));
                    session
                        .rank_call(id, frame.rank.as_ref(), req.map(|r| (&raw, r)))
                        .await
                }
                Some("call_ranks") => {
                    let reqs = frame.reqs.as_ref().map(|reqs| {
                        reqs.iter()
                            .map(|r| shape::judge_payload(&raw, r))
                            .collect::<Option<Vec<_>>>()
                    });
                    session
                        .call_ranks(id, reqs.flatten().map(|r| (&raw, r)))
                        .await
                }
                Some("ranks") => {
                    Reply::Value(session.ranks_op(id, frame.world_size.as_ref()).await)
                }
                Some("call") => {
                    let Some(req) = frame
                        .subject_call()
                        .and_then(|(_, req)| shape::judge_payload(&raw, req))
                    else {
                        session
                            .fail_infra("the judge broke the protocol: a call of an unknown shape");
                        break;
                    };
                    let call = Call {
                        id,
                        req: (&raw, req),
                        callbacks,
                    };
                    session.call(call, &mut jr, &mut jw).await
                }
                Some("event") => match session
                    .event(frame.event.clone().unwrap_or(Value::Null))
                    .await
                {
                    Some(v) => Reply::Value(v),
                    None => Reply::None,
                },
                _ => Reply::None,
            };
            let written = match reply {
                Reply::None => Ok(()),
                Reply::Gone => break,
                Reply::Value(v) => write_frame(&mut jw, &v).await,
                Reply::Composed(c) => frame::write_parts(&mut jw, &c.slices()).await,
            };
            if written.is_err() {
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

/// Inside a callback: sends the subject's frame (a callback request, or the reply to a nested
/// call) to the judge and waits for what the protocol lets the judge say there: the answer
/// to the pending callback, or a nested call to the subject (whose id is pushed on `pending`
/// and whose callbacks are handed out). Rank requests are refused there; anything else (an
/// event, an answer for another call) is the judge's protocol break and is never forwarded.
/// Returns the frame for the subject.
async fn judge_turn(
    to_judge: &Composed,
    jr: &mut OwnedReadHalf,
    jw: &mut OwnedWriteHalf,
    pending: &mut Vec<u64>,
    callbacks: &mut HashSet<u64>,
    group: Option<u32>,
) -> Result<Composed, Fault> {
    frame::write_parts(jw, &to_judge.slices())
        .await
        .map_err(|_| Fault::JudgeGone)?;
    let top = *pending.last().expect("a call is pending");
    loop {
        let raw = match read_raw(jr, MAX_JUDGE_FRAME).await {
            Ok(raw) => Arc::new(raw),
            Err(FrameError::Closed) => return Err(Fault::JudgeGone),
            Err(_) => return Err(Fault::Judge("an unreadable frame inside a callback")),
        };
        let (frame, handed_out) = JudgeFrame::parse(&raw)
            .map_err(|_| Fault::Judge("a frame of an unknown shape inside a callback"))?;
        if let Some((key, value)) = frame.callback_answer() {
            if frame.id != Some(top) {
                return Err(Fault::Judge("an answer to another callback"));
            }
            let range = shape::judge_payload(&raw, value).ok_or(Fault::Judge("a bad answer"))?;
            let mut out = Composed::default();
            out.text(&format!("{{\"id\":{top},\"{key}\":"));
            out.raw(&raw, range);
            out.text("}");
            return Ok(out);
        }
        if let Some((id, req)) = frame.subject_call() {
            let range = shape::judge_payload(&raw, req).ok_or(Fault::Judge("a bad request"))?;
            callbacks.extend(handed_out);
            pending.push(id);
            return Ok(shape::request(id, &raw, range));
        }
        match (frame.op.as_deref(), frame.id) {
            (Some("call" | "call_ranks" | "ranks"), Some(id)) => {
                // A rank group cannot be served while the subject waits inside a call.
                let refused = json!({"id": id, "group": group, "fault": "refused"});
                write_frame(jw, &refused)
                    .await
                    .map_err(|_| Fault::JudgeGone)?;
            }
            _ => return Err(Fault::Judge("a frame other than the callback's answer")),
        }
    }
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
    /// The judge callbacks handed out to this subject (`{"$callback":N}` in its requests).
    callbacks: HashSet<u64>,
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

/// What the broker answers a judge frame with.
enum Reply {
    /// Nothing (most events).
    None,
    Value(Value),
    /// A frame composed around subject payloads.
    Composed(Composed),
    /// The judge went away during a call: the phase is over.
    Gone,
}

/// One call of the judge's to the subject: its id, its request (in the judge frame's bytes)
/// and the callbacks the request hands out.
struct Call<'a> {
    id: u64,
    req: (&'a Arc<Vec<u8>>, std::ops::Range<usize>),
    callbacks: Vec<u64>,
}

/// Why a call did not get its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Timeout,
    Budget,
    Died,
    /// The subject broke the protocol (a frame of the wrong shape, a callback it was never
    /// handed, too many callbacks): its own failure.
    Protocol,
    /// The judge broke the protocol inside a callback: ours.
    Judge(&'static str),
    /// The judge went away inside a callback.
    JudgeGone,
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
            callbacks: HashSet::new(),
        });
        Ok(())
    }

    /// Relays one judge call (and any callbacks it causes) and returns the judge's reply.
    /// Every frame either way is checked for its exact shape and composed anew; the subject's
    /// time is the call's wall time less the judge's time inside real callbacks.
    async fn call(
        &mut self,
        call: Call<'_>,
        jr: &mut OwnedReadHalf,
        jw: &mut OwnedWriteHalf,
    ) -> Reply {
        self.out.calls += 1;
        let id = call.id;
        let deadline = self.call_deadline();
        let max_reply = self.cfg.max_reply;
        let max_callbacks = self.cfg.max_callbacks;
        let group = self.group_id();
        let Some(subject) = self.subject.as_mut() else {
            return Reply::Value(json!({"id": id, "fault": "crashed", "generation": null}));
        };
        subject.callbacks.extend(call.callbacks);
        let started = Instant::now();
        let mut judge_time = Duration::ZERO;
        let outcome: Result<SubjectReply, Fault> = async {
            let over = || {
                if deadline.1 {
                    Fault::Budget
                } else {
                    Fault::Timeout
                }
            };
            let mut pending = vec![id];
            let mut made = 0usize;
            let mut to_subject = shape::request(id, call.req.0, call.req.1.clone());
            loop {
                let charged = started.elapsed().saturating_sub(judge_time);
                let left = deadline.0.checked_sub(charged).ok_or_else(over)?;
                // Writing to the subject is its time too: one that stops reading stalls itself.
                let exchange = async {
                    frame::write_parts(&mut subject.writer, &to_subject.slices())
                        .await
                        .map_err(|_| Fault::Died)?;
                    match read_raw(&mut subject.reader, max_reply).await {
                        Ok(raw) => Ok(raw),
                        Err(FrameError::Closed | FrameError::Io(_)) => Err(Fault::Died),
                        Err(_) => Err(Fault::Protocol),
                    }
                };
                let raw = tokio::time::timeout(left, exchange)
                    .await
                    .map_err(|_| over())??;
                let reply = SubjectReply::parse(raw).map_err(|()| Fault::Protocol)?;
                if pending.last() != Some(&reply.id) {
                    return Err(Fault::Protocol);
                }
                match reply.kind {
                    Kind::Callback { cb, .. } => {
                        made += 1;
                        if made > max_callbacks || !subject.callbacks.contains(&cb) {
                            return Err(Fault::Protocol);
                        }
                    }
                    Kind::Ok | Kind::Err => {
                        pending.pop();
                        if pending.is_empty() {
                            return Ok(reply);
                        }
                        // A nested call's reply goes to the judge, which is inside a callback.
                    }
                }
                let judging = Instant::now();
                let answer = judge_turn(
                    &reply.to_judge(None),
                    jr,
                    jw,
                    &mut pending,
                    &mut subject.callbacks,
                    group,
                )
                .await;
                judge_time += judging.elapsed();
                to_subject = answer?;
            }
        }
        .await;
        let subject_time = started.elapsed().saturating_sub(judge_time);
        if let Some(test) = &mut self.test {
            test.subject_time += subject_time;
            if let Some(s) = &mut self.subject {
                s.meter.sample(&mut test.baseline);
            }
        }
        match outcome {
            Ok(reply) => Reply::Composed(reply.to_judge(Some(subject_time.as_nanos() as u64))),
            Err(Fault::JudgeGone) => Reply::Gone,
            Err(fault) => {
                if let Fault::Judge(why) = fault {
                    self.fail_infra(&format!("the judge broke the protocol: {why}"));
                }
                Reply::Value(self.fault(json!(id), fault).await)
            }
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
            // Not the subject's doing: nothing is charged to the test.
            Fault::Judge(_) | Fault::JudgeGone => ("protocol", None),
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
