//! Multi-rank groups (docs/probe-protocol.md "Rank groups"): a probe starts `world_size`
//! subject sandboxes at once, one per rank, each behind a socket of its own; the broker sends
//! requests to several ranks at the same time (a collective needs every rank inside the call
//! at once) and measures each rank from outside: its subject time, its memory (its own
//! cgroup) and the bytes it sent (its own network namespace).
//!
//! A fault on any rank (death, a deadline, a broken protocol) ends the whole group: the other
//! ranks would only wait for the dead one inside their collective.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::{Value, json};
use tokio::net::UnixListener;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::meter::{Baseline, Meter, Usage};
use super::shape::{self, Composed, Kind, MAX_TO_JUDGE, SubjectReply};
use super::{Fault, Reply, SUBJECT_SOCKET, Session, SubjectHost, accept_subject, listen, read_raw};
use crate::grade::sandbox::broker::FrameError;
use crate::grading::Kill;

pub use crate::task::MAX_WORLD_SIZE;
/// The smallest (one rank is the ordinary subject).
pub const MIN_WORLD_SIZE: usize = 2;

/// Where rank 0 can be reached by the other ranks (`MASTER_ADDR`, `MASTER_PORT`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankAddress {
    pub master_addr: String,
    pub master_port: u16,
}

/// One rank's connection and meter.
pub(super) struct RankConn {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    meter: Meter,
    /// Set while a test is in flight.
    baseline: Option<Baseline>,
}

/// The running group.
pub(super) struct Group {
    pub(super) id: u32,
    ranks: Vec<RankConn>,
}

/// What one rank used during a test (one entry per rank of each group the test ran).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RankUsage {
    pub(super) usage: Usage,
    /// Whether the executor measures this rank's traffic at all (the local executor does not).
    pub(super) traffic_measured: bool,
}

/// One rank's part of a call.
enum RankOutcome {
    Reply(SubjectReply, Duration),
    Fault(Fault),
}

/// One rank's reply as the judge gets it, with the rank's time (ns).
enum RankReply {
    Reply(SubjectReply, u64),
    /// The group's replies together did not fit the judge's frame: this one, the largest,
    /// gave way (`infradev.NotEncodable`).
    TooLarge(u64),
}

/// What a `call_ranks` answer needs besides the payloads (its envelope, rank entries).
const COMPOSITE_SLACK: usize = 4096;

/// A request of the judge's: its frame's bytes and where the request lies in them.
pub(super) type JudgeReq<'a> = (&'a Arc<Vec<u8>>, Range<usize>);
/// `call_ranks`'s requests: one per rank, in the frame's bytes.
pub(super) type JudgeReqs<'a> = (&'a Arc<Vec<u8>>, Vec<Range<usize>>);

/// The socket directory of rank `rank` under the phase's directory.
pub fn rank_socket_dir(root: &Path, rank: usize) -> PathBuf {
    root.join(format!("rank{rank}-socket"))
}

impl<H: SubjectHost> Session<'_, H> {
    /// `{"op":"ranks","id":N,"world_size":W}`: starts a group of W ranks (ending any running
    /// one); `world_size: 0` ends the group.
    pub(super) async fn ranks_op(&mut self, id: u64, world_size: Option<&Value>) -> Value {
        let world = world_size.and_then(Value::as_u64).unwrap_or(u64::MAX);
        self.stop_group().await;
        if world == 0 {
            return json!({"id": id, "group": null});
        }
        let world = world as usize;
        if !(MIN_WORLD_SIZE..=MAX_WORLD_SIZE).contains(&world) {
            return json!({"id": id, "group": null, "fault": "refused"});
        }
        match self.start_group(world).await {
            Ok(group) => json!({"id": id, "group": group, "world_size": world}),
            Err(e) => {
                self.host.stop_ranks().await;
                self.fail_infra(&format!("a rank group could not be started: {e}"));
                json!({"id": id, "group": null, "fault": "unavailable"})
            }
        }
    }

    async fn start_group(&mut self, world: usize) -> Result<u32, String> {
        self.groups += 1;
        let group = self.groups;
        self.out.rank_groups = group;
        let mut listeners: Vec<UnixListener> = Vec::with_capacity(world);
        let mut dirs = Vec::with_capacity(world);
        for rank in 0..world {
            let dir = rank_socket_dir(&self.rank_root, rank);
            crate::grade::sandbox::private_dir(&dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            // A listener of its own per group: nothing queued by an earlier group survives.
            listeners.push(
                listen(&dir.join(SUBJECT_SOCKET))
                    .map_err(|e| format!("cannot listen for rank {rank}: {e}"))?,
            );
            dirs.push(dir);
        }
        let address = self.host.start_ranks(group, &dirs).await?;
        let timeout = self.cfg.startup_timeout;
        let accepted =
            futures_util::future::join_all(listeners.iter().enumerate().map(|(rank, listener)| {
                let welcome = json!({
                    "op": "welcome",
                    "generation": group,
                    "env": {
                        "RANK": rank.to_string(),
                        "LOCAL_RANK": rank.to_string(),
                        "WORLD_SIZE": world.to_string(),
                        "MASTER_ADDR": address.master_addr,
                        "MASTER_PORT": address.master_port.to_string(),
                    },
                });
                accept_subject(listener, timeout, welcome)
            }))
            .await;
        let mut conns = Vec::with_capacity(world);
        for (rank, a) in accepted.into_iter().enumerate() {
            conns.push(a.map_err(|e| format!("rank {rank}: {e}"))?);
        }
        let mut meters = self.host.rank_meters().await;
        meters.resize_with(world, Meter::default);
        let in_test = self.test.is_some();
        let ranks = conns
            .into_iter()
            .zip(meters)
            .map(|((reader, writer), mut meter)| RankConn {
                reader,
                writer,
                baseline: in_test.then(|| meter.begin()),
                meter,
            })
            .collect();
        self.group = Some(Group { id: group, ranks });
        Ok(group)
    }

    /// Ends the running group, if any: its measurements go to the test in flight. A rank
    /// that is gone by then (it exited after its last call) crashed: the submission's failure.
    pub(super) async fn stop_group(&mut self) {
        let Some(group) = self.group.take() else {
            return;
        };
        let vanished = self.record_group(group);
        if vanished && let Some(test) = &mut self.test {
            test.kill = test.kill.or(Some(Kill::Crashed));
        }
        self.host.stop_ranks().await;
    }

    /// Closes a group's measurements into the test in flight; says whether a rank of it
    /// has vanished (its traffic counts as last read, after its last call).
    fn record_group(&mut self, mut group: Group) -> bool {
        let Some(test) = &mut self.test else {
            return false;
        };
        let mut vanished = false;
        for rank in &mut group.ranks {
            if let Some(baseline) = rank.baseline.take() {
                vanished |= rank.meter.vanished();
                test.ranks.push(RankUsage {
                    usage: rank.meter.end(&baseline),
                    traffic_measured: rank.meter.measures_traffic(),
                });
            }
        }
        vanished
    }

    /// Arms every rank's measurement (a test starts while a group runs).
    pub(super) fn begin_group_measurement(&mut self) {
        if let Some(group) = &mut self.group {
            for rank in &mut group.ranks {
                rank.baseline = Some(rank.meter.begin());
            }
        }
    }

    /// `{"op":"call","id":N,"rank":r,"req":...}`: one request to one rank.
    pub(super) async fn rank_call(
        &mut self,
        id: u64,
        rank: Option<&Value>,
        req: Option<JudgeReq<'_>>,
    ) -> Reply {
        let world = self.group.as_ref().map_or(0, |g| g.ranks.len());
        let rank = rank.and_then(Value::as_u64).map(|r| r as usize);
        let (Some(rank), Some((bytes, range))) = (rank.filter(|r| *r < world), req) else {
            return Reply::Value(self.no_group(id));
        };
        let mut reqs: Vec<Option<Composed>> = (0..world).map(|_| None).collect();
        reqs[rank] = Some(shape::request(id, bytes, range));
        match self.exchange(id, reqs).await {
            Ok(mut replies) => match replies.swap_remove(rank) {
                Some(RankReply::Reply(reply, ns)) => {
                    Reply::Composed(shape::rank_reply(id, &reply, ns, self.group_id()))
                }
                // One reply alone always fits the judge's frame.
                _ => unreachable!("rank {rank} was called and its reply kept"),
            },
            Err(fault) => Reply::Value(fault),
        }
    }

    /// `{"op":"call_ranks","id":N,"reqs":[one request per rank]}`: every rank at once.
    pub(super) async fn call_ranks(&mut self, id: u64, reqs: Option<JudgeReqs<'_>>) -> Reply {
        let world = self.group.as_ref().map_or(0, |g| g.ranks.len());
        let reqs = match reqs {
            Some((bytes, r)) if world > 0 && r.len() == world => r
                .into_iter()
                .map(|range| Some(shape::request(id, bytes, range)))
                .collect(),
            Some(_) if world > 0 => {
                return Reply::Value(
                    json!({"id": id, "group": self.group_id(), "fault": "refused"}),
                );
            }
            _ => return Reply::Value(self.no_group(id)),
        };
        match self.exchange(id, reqs).await {
            Ok(replies) => {
                let group = self.group_id().map_or("null".to_owned(), |g| g.to_string());
                let mut out = Composed::default();
                out.text(&format!("{{\"id\":{id},\"group\":{group},\"ranks\":["));
                for (rank, reply) in replies.iter().enumerate() {
                    if rank > 0 {
                        out.text(",");
                    }
                    match reply {
                        Some(RankReply::Reply(r, ns)) => shape::rank_entry(&mut out, Some(r), *ns),
                        Some(RankReply::TooLarge(ns)) => shape::rank_entry(&mut out, None, *ns),
                        None => unreachable!("every rank was called"),
                    }
                }
                out.text("]}");
                debug_assert!(out.len() <= MAX_TO_JUDGE);
                Reply::Composed(out)
            }
            Err(fault) => Reply::Value(fault),
        }
    }

    pub(super) fn group_id(&self) -> Option<u32> {
        self.group.as_ref().map(|g| g.id)
    }

    fn no_group(&self, id: u64) -> Value {
        json!({"id": id, "group": null, "fault": "no_group"})
    }

    /// Sends each rank its request (if any) at once and waits for every reply. The first
    /// fault ends the group and becomes the judge's reply. Replies are kept as the bytes they
    /// came in; while those held would not fit the judge's frame together, the largest gives
    /// way, so the grader holds at most one frame's worth plus the reply that arrived last.
    async fn exchange(
        &mut self,
        id: u64,
        reqs: Vec<Option<Composed>>,
    ) -> Result<Vec<Option<RankReply>>, Value> {
        self.out.calls += 1;
        let (limit, is_budget) = self.call_deadline();
        let max_reply = self.cfg.max_reply;
        let group = self.group.as_mut().expect("checked by the caller");
        let started = Instant::now();
        let world = group.ranks.len();
        let mut pending: FuturesUnordered<_> = group
            .ranks
            .iter_mut()
            .zip(reqs)
            .enumerate()
            .filter_map(|(rank, (conn, req))| {
                let req = req?;
                Some(async move {
                    let outcome = serve_rank(conn, &req, id, limit, max_reply).await;
                    (rank, outcome)
                })
            })
            .collect();
        let mut replies: Vec<Option<RankReply>> = (0..world).map(|_| None).collect();
        let mut held = 0usize;
        let mut failed = None;
        while let Some((rank, outcome)) = pending.next().await {
            match outcome {
                RankOutcome::Reply(reply, took) => {
                    held += reply.payload_len();
                    replies[rank] = Some(RankReply::Reply(reply, took.as_nanos() as u64));
                    while held > MAX_TO_JUDGE - COMPOSITE_SLACK {
                        let Some((largest, len, ns)) = largest_reply(&replies) else {
                            break;
                        };
                        held -= len;
                        replies[largest] = Some(RankReply::TooLarge(ns));
                    }
                }
                RankOutcome::Fault(fault) => {
                    failed = Some((rank, fault));
                    break;
                }
            }
        }
        drop(pending);
        let wall = started.elapsed();
        for rank in &mut group.ranks {
            if let Some(b) = &mut rank.baseline {
                rank.meter.sample(b);
            }
        }
        if let Some(test) = &mut self.test {
            test.subject_time += wall;
        }
        let Some((rank, fault)) = failed else {
            return Ok(replies);
        };
        let fault = match fault {
            Fault::Timeout if is_budget => Fault::Budget,
            f => f,
        };
        let group_id = self.group_id();
        let ends = {
            let group = self.group.take().expect("still running");
            self.record_group(group);
            self.host.stop_ranks().await
        };
        let oom = ends.iter().any(|e| e.oom_killed);
        let name = self.record_fault(fault, oom);
        Err(json!({"id": id, "group": group_id, "fault": name, "rank": rank}))
    }
}

/// The held reply with the largest payload: its rank, its payload's size and its time.
fn largest_reply(replies: &[Option<RankReply>]) -> Option<(usize, usize, u64)> {
    replies
        .iter()
        .enumerate()
        .filter_map(|(rank, r)| match r {
            Some(RankReply::Reply(reply, ns)) => Some((rank, reply.payload_len(), *ns)),
            _ => None,
        })
        .max_by_key(|(_, len, _)| *len)
}

/// One rank's side of a call: its request out, then its reply, of an exact shape. No
/// callback is ever handed to a rank (the judge cannot serve one inside a collective), so a
/// rank's callback frame is its protocol break.
async fn serve_rank(
    conn: &mut RankConn,
    request: &Composed,
    id: u64,
    limit: Duration,
    max_reply: usize,
) -> RankOutcome {
    let started = Instant::now();
    let exchange = async {
        super::frame::write_parts(&mut conn.writer, &request.slices())
            .await
            .map_err(|_| Fault::Died)?;
        match read_raw(&mut conn.reader, max_reply).await {
            Ok(raw) => Ok(raw),
            Err(FrameError::Closed | FrameError::Io(_)) => Err(Fault::Died),
            Err(_) => Err(Fault::Protocol),
        }
    };
    let raw = match tokio::time::timeout(limit, exchange).await {
        Err(_) => return RankOutcome::Fault(Fault::Timeout),
        Ok(Err(fault)) => return RankOutcome::Fault(fault),
        Ok(Ok(raw)) => raw,
    };
    match SubjectReply::parse(raw) {
        Ok(reply) if reply.id == id && matches!(reply.kind, Kind::Ok | Kind::Err) => {
            RankOutcome::Reply(reply, started.elapsed())
        }
        _ => RankOutcome::Fault(Fault::Protocol),
    }
}

/// The largest bytes sent by one rank of the test's groups, and the total over them; `None`
/// where a rank's traffic is measured by design but could not be read.
pub(super) fn rank_traffic(ranks: &[RankUsage]) -> Result<Option<(u64, u64)>, ()> {
    let mut max = None::<u64>;
    let mut total = 0u64;
    for r in ranks.iter().filter(|r| r.traffic_measured) {
        let sent = r.usage.sent_bytes.ok_or(())?;
        max = Some(max.map_or(sent, |m| m.max(sent)));
        total = total.saturating_add(sent);
    }
    Ok(max.map(|m| (m, total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(sent: Option<u64>, measured: bool) -> RankUsage {
        RankUsage {
            usage: Usage {
                peak_memory_mb: None,
                sent_bytes: sent,
            },
            traffic_measured: measured,
        }
    }

    #[test]
    fn rank_traffic_is_the_max_and_the_total_of_measured_ranks() {
        assert_eq!(rank_traffic(&[]), Ok(None));
        assert_eq!(
            rank_traffic(&[rank(Some(10), true), rank(Some(30), true)]),
            Ok(Some((30, 40)))
        );
        // The local executor does not measure rank traffic: no figure, not zero.
        assert_eq!(
            rank_traffic(&[rank(None, false), rank(None, false)]),
            Ok(None)
        );
        // Measured by design but unreadable: an error, never a made-up figure.
        assert_eq!(
            rank_traffic(&[rank(Some(1), true), rank(None, true)]),
            Err(())
        );
    }
}
