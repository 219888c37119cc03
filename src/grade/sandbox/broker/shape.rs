//! The exact shapes of the frames the broker accepts, and the frames it composes
//! (docs/probe-protocol.md "Frame shapes and limits").
//!
//! Frames are never parsed into a `serde_json::Value`: the envelope is a typed struct that
//! refuses unknown and duplicate keys, and every payload (a request, a reply's value, a
//! callback's arguments) is a `RawValue`, checked to be strict JSON (iteratively, at any depth)
//! and passed on as its bytes. What the broker forwards it composes itself, envelope by
//! envelope; nothing a sandbox wrote around a payload reaches the other side.

use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// The largest frame either sandbox may send (`infradev_wire.MAX_FRAME`).
pub const MAX_FRAME: usize = 64 << 20;
/// The deepest JSON nesting of any frame (`infradev_wire.MAX_FRAME_DEPTH`): every frame built
/// from values within the codec's `MAX_DEPTH` fits, whichever envelope carries them.
pub const MAX_FRAME_DEPTH: usize = 256;
/// The largest frame the broker sends the judge (`infradev_wire.MAX_ANSWER`, the judge's read
/// limit): a reply of `MAX_FRAME` plus the broker's own fields.
pub const MAX_TO_JUDGE: usize = MAX_FRAME + (1 << 16);

/// A key present with any value, `null` included (`Option<&RawValue>` alone reads a `null`
/// as absent).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

/// Where `raw` (borrowed from `buf`) lies in `buf`.
fn range_in(buf: &[u8], raw: &RawValue) -> Option<Range<usize>> {
    let start = (raw.get().as_ptr() as usize).checked_sub(buf.as_ptr() as usize)?;
    let end = start.checked_add(raw.get().len())?;
    (end <= buf.len()).then_some(start..end)
}

/// What one pass over a frame's bytes found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// The deepest nesting of arrays and objects.
    pub depth: usize,
    /// The integers of every `"$callback"` key: the judge callbacks a request hands out.
    pub callbacks: Vec<u64>,
    /// A `\uXXXX` escape of half a surrogate pair (JSON's grammar allows it; no text is made
    /// of it, and neither codec ever writes one).
    pub lone_surrogate: bool,
}

/// One linear, iterative pass over JSON text (already checked to be strict JSON).
pub fn scan(json: &[u8]) -> Scan {
    let mut out = Scan::default();
    let mut depth = 0usize;
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'{' | b'[' => {
                depth += 1;
                out.depth = out.depth.max(depth);
                i += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b'"' => {
                let start = i + 1;
                let mut j = start;
                let mut escaped = false;
                while j < json.len() && json[j] != b'"' {
                    if json[j] == b'\\' {
                        escaped = true;
                        match surrogate_at(json, j) {
                            Some(Surrogate::High)
                                if surrogate_at(json, j + 6) == Some(Surrogate::Low) =>
                            {
                                j += 12
                            }
                            Some(_) => {
                                out.lone_surrogate = true;
                                j += 2;
                            }
                            None => j += 2,
                        }
                    } else {
                        j += 1;
                    }
                }
                let end = j.min(json.len());
                i = end + 1;
                let colon = skip_ws(json, i);
                if json.get(colon) == Some(&b':')
                    && is_callback_key(json, start, end, escaped)
                    && let Some(n) = integer_at(json, skip_ws(json, colon + 1))
                {
                    out.callbacks.push(n);
                }
            }
            _ => i += 1,
        }
    }
    out
}

#[derive(Debug, PartialEq, Eq)]
enum Surrogate {
    High,
    Low,
}

/// Whether the escape at `i` is `\uD800`-`\uDFFF`, and which half.
fn surrogate_at(json: &[u8], i: usize) -> Option<Surrogate> {
    let escape = json.get(i..i + 6)?;
    if &escape[..2] != b"\\u" {
        return None;
    }
    let code = u16::from_str_radix(std::str::from_utf8(&escape[2..]).ok()?, 16).ok()?;
    match code {
        0xD800..=0xDBFF => Some(Surrogate::High),
        0xDC00..=0xDFFF => Some(Surrogate::Low),
        _ => None,
    }
}

fn skip_ws(json: &[u8], mut i: usize) -> usize {
    while json.get(i).is_some_and(|b| b" \t\r\n".contains(b)) {
        i += 1;
    }
    i
}

fn is_callback_key(json: &[u8], start: usize, end: usize, escaped: bool) -> bool {
    const KEY: &str = "$callback";
    if !escaped {
        return &json[start..end] == KEY.as_bytes();
    }
    // An escaped spelling (`"\u0024callback"`) decodes to the same tag.
    serde_json::from_slice::<String>(&json[start - 1..(end + 1).min(json.len())])
        .is_ok_and(|k| k == KEY)
}

/// A non-negative JSON integer (no fraction, no exponent) starting at `i`.
fn integer_at(json: &[u8], i: usize) -> Option<u64> {
    let digits = json[i.min(json.len())..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || matches!(json.get(i + digits), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    std::str::from_utf8(&json[i..i + digits]).ok()?.parse().ok()
}

/// A frame of the subject's, as the protocol allows it: `{"id":N,"ok":V}`, `{"id":N,"err":E}`
/// or `{"id":N,"callback":{"cb":C,"args":A,"kwargs":K}}`, exactly those keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubjectFrame<'a> {
    id: u64,
    #[serde(default, borrow, deserialize_with = "present")]
    ok: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    err: Option<&'a RawValue>,
    #[serde(default, borrow)]
    callback: Option<CallbackCall<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallbackCall<'a> {
    cb: u64,
    #[serde(borrow)]
    args: &'a RawValue,
    #[serde(borrow)]
    kwargs: &'a RawValue,
}

/// What a subject's frame is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    Ok,
    Err,
    /// The subject calls judge callback `cb`.
    Callback {
        cb: u64,
        args: Range<usize>,
        kwargs: Range<usize>,
    },
}

/// A subject's frame whose shape was checked; its payload stays the bytes it arrived as.
#[derive(Debug)]
pub struct SubjectReply {
    bytes: Arc<Vec<u8>>,
    pub id: u64,
    pub kind: Kind,
    /// The `ok` or `err` value (empty for a callback).
    payload: Range<usize>,
}

impl SubjectReply {
    /// Checks a subject frame's shape and depth; `Err` is the subject's protocol fault.
    pub fn parse(bytes: Vec<u8>) -> Result<SubjectReply, ()> {
        let frame: SubjectFrame = serde_json::from_slice(&bytes).map_err(|_| ())?;
        let at = |raw: &RawValue| range_in(&bytes, raw).ok_or(());
        let (kind, payload) = match (frame.ok, frame.err, frame.callback) {
            (Some(v), None, None) => (Kind::Ok, at(v)?),
            (None, Some(v), None) => (Kind::Err, at(v)?),
            (None, None, Some(c)) => (
                Kind::Callback {
                    cb: c.cb,
                    args: at(c.args)?,
                    kwargs: at(c.kwargs)?,
                },
                0..0,
            ),
            _ => return Err(()),
        };
        let id = frame.id;
        let scanned = scan(&bytes);
        if scanned.depth > MAX_FRAME_DEPTH || scanned.lone_surrogate {
            return Err(());
        }
        Ok(SubjectReply {
            bytes: Arc::new(bytes),
            id,
            kind,
            payload,
        })
    }

    /// The bytes of the `ok`/`err` value.
    pub fn payload_len(&self) -> usize {
        self.payload.len()
    }

    /// `"ok"` or `"err"` (a callback has neither).
    fn key(&self) -> &'static str {
        match self.kind {
            Kind::Err => "err",
            _ => "ok",
        }
    }

    /// Appends `"ok":V` / `"err":E` to `out`.
    fn put_result(&self, out: &mut Composed) {
        out.text(&format!("\"{}\":", self.key()));
        out.raw(&self.bytes, self.payload.clone());
    }

    /// The frame the judge gets for this reply: `{"id":N,"ok":V}` (or `err`), with the
    /// broker's `subject_ns` for the call's final reply, or the callback request
    /// `{"id":N,"callback":{"cb":C,"args":A,"kwargs":K}}`.
    pub fn to_judge(&self, subject_ns: Option<u64>) -> Composed {
        let mut out = Composed::default();
        out.text(&format!("{{\"id\":{},", self.id));
        match &self.kind {
            Kind::Callback { cb, args, kwargs } => {
                out.text(&format!("\"callback\":{{\"cb\":{cb},\"args\":"));
                out.raw(&self.bytes, args.clone());
                out.text(",\"kwargs\":");
                out.raw(&self.bytes, kwargs.clone());
                out.text("}}");
            }
            Kind::Ok | Kind::Err => {
                self.put_result(&mut out);
                if let Some(ns) = subject_ns {
                    out.text(&format!(",\"subject_ns\":{ns}"));
                }
                out.text("}");
            }
        }
        out
    }
}

/// A frame composed by the broker from its own text and payloads it checked, sent without
/// copying the payloads.
#[derive(Debug, Default)]
pub struct Composed {
    pieces: Vec<(Arc<Vec<u8>>, Range<usize>)>,
    len: usize,
}

impl Composed {
    pub fn text(&mut self, s: &str) {
        let bytes = s.as_bytes().to_vec();
        let n = bytes.len();
        self.pieces.push((Arc::new(bytes), 0..n));
        self.len += n;
    }

    pub fn raw(&mut self, buf: &Arc<Vec<u8>>, range: Range<usize>) {
        self.len += range.len();
        self.pieces.push((Arc::clone(buf), range));
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn slices(&self) -> Vec<&[u8]> {
        self.pieces.iter().map(|(b, r)| &b[r.clone()]).collect()
    }

    /// The whole frame in one buffer (for tests).
    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<u8> {
        self.slices().concat()
    }
}

/// `{"id":N,"req":R}`: a request as the subject (or a rank) gets it.
pub fn request(id: u64, req: &Arc<Vec<u8>>, range: Range<usize>) -> Composed {
    let mut out = Composed::default();
    out.text(&format!("{{\"id\":{id},\"req\":"));
    out.raw(req, range);
    out.text("}");
    out
}

/// One rank's entry of a `call_ranks` answer: `{"ok":V,"subject_ns":T}` (or `err`); a reply
/// that did not fit the judge's frame is `infradev.NotEncodable`.
pub fn rank_entry(out: &mut Composed, reply: Option<&SubjectReply>, subject_ns: u64) {
    out.text("{");
    match reply {
        Some(r) => r.put_result(out),
        None => out.text(TOO_LARGE),
    }
    out.text(&format!(",\"subject_ns\":{subject_ns}}}"));
}

/// What a rank's reply becomes when the group's replies together exceed the judge's frame.
const TOO_LARGE: &str = r#""err":{"builtin":"infradev.NotEncodable","classes":[]}"#;

/// One rank's reply to `{"op":"call","rank":r}`: `{"id":N,"ok":V,"subject_ns":T,"group":G}`.
pub fn rank_reply(id: u64, reply: &SubjectReply, subject_ns: u64, group: Option<u32>) -> Composed {
    let mut out = Composed::default();
    out.text(&format!("{{\"id\":{id},"));
    reply.put_result(&mut out);
    let group = group.map_or("null".to_owned(), |g| g.to_string());
    out.text(&format!(",\"subject_ns\":{subject_ns},\"group\":{group}}}"));
    out
}

/// A frame of the judge's. Every key the protocol gives the judge, no other; which of them a
/// frame must or may carry depends on its `op` (the broker's loop checks that).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeFrame<'a> {
    #[serde(default)]
    pub op: Option<String>,
    #[serde(default)]
    pub id: Option<u64>,
    #[serde(default)]
    pub rank: Option<Value>,
    #[serde(default)]
    pub world_size: Option<Value>,
    #[serde(default)]
    pub event: Option<Value>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub req: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub reqs: Option<Vec<&'a RawValue>>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub callback_ok: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    pub callback_err: Option<&'a RawValue>,
}

impl<'a> JudgeFrame<'a> {
    /// Checks a judge frame's keys and depth; returns it with the callback ids it hands out.
    pub fn parse(bytes: &'a [u8]) -> Result<(JudgeFrame<'a>, Vec<u64>), String> {
        let frame: JudgeFrame = serde_json::from_slice(bytes)
            .map_err(|e| format!("a frame of an unknown shape: {e}"))?;
        let scanned = scan(bytes);
        if scanned.depth > MAX_FRAME_DEPTH {
            return Err(format!("a frame nested deeper than {MAX_FRAME_DEPTH}"));
        }
        if scanned.lone_surrogate {
            return Err("a string with half a surrogate pair".to_owned());
        }
        Ok((frame, scanned.callbacks))
    }

    /// `{"id":N,"callback_ok":V}` / `{"id":N,"callback_err":E}` and nothing else: the
    /// answer's key and value.
    pub fn callback_answer(&self) -> Option<(&'static str, &'a RawValue)> {
        if self.op.is_some()
            || self.id.is_none()
            || self.rank.is_some()
            || self.world_size.is_some()
            || self.event.is_some()
            || self.req.is_some()
            || self.reqs.is_some()
        {
            return None;
        }
        match (self.callback_ok, self.callback_err) {
            (Some(v), None) => Some(("callback_ok", v)),
            (None, Some(e)) => Some(("callback_err", e)),
            _ => None,
        }
    }

    /// `{"op":"call","id":N,"req":R}` and nothing else (a call to the subject): its id and
    /// request.
    pub fn subject_call(&self) -> Option<(u64, &'a RawValue)> {
        if self.op.as_deref() != Some("call")
            || self.rank.is_some()
            || self.world_size.is_some()
            || self.event.is_some()
            || self.reqs.is_some()
            || self.callback_ok.is_some()
            || self.callback_err.is_some()
        {
            return None;
        }
        Some((self.id?, self.req?))
    }
}

/// A judge payload as a piece of a composed frame: the frame's bytes, shared, and where the
/// payload lies in them.
pub fn judge_payload(bytes: &Arc<Vec<u8>>, raw: &RawValue) -> Option<Range<usize>> {
    range_in(bytes, raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<SubjectReply, ()> {
        SubjectReply::parse(text.as_bytes().to_vec())
    }

    #[test]
    fn the_subject_frames_the_protocol_allows_and_no_other() {
        let ok = parse(r#"{"id":3,"ok":null}"#).unwrap();
        assert_eq!((ok.id, ok.kind.clone()), (3, Kind::Ok));
        assert_eq!(
            String::from_utf8(ok.to_judge(Some(7)).to_vec()).unwrap(),
            r#"{"id":3,"ok":null,"subject_ns":7}"#
        );
        // Escapes, a surrogate pair among them, are text like any other.
        assert!(parse(r#"{"id":3,"ok":"\ud83d\ude00 \u00e9 \\u d800 \"\\"}"#).is_ok());
        let err = parse(r#"{"err":{"builtin":null,"classes":[]},"id":4}"#).unwrap();
        assert_eq!(err.kind, Kind::Err);
        assert_eq!(
            String::from_utf8(err.to_judge(None).to_vec()).unwrap(),
            r#"{"id":4,"err":{"builtin":null,"classes":[]}}"#
        );
        let cb =
            parse(r#"{"id":5,"callback":{"cb":2,"args":[1, 2],"kwargs":{"$dict":[]}}}"#).unwrap();
        assert!(matches!(cb.kind, Kind::Callback { cb: 2, .. }));
        assert_eq!(
            String::from_utf8(cb.to_judge(None).to_vec()).unwrap(),
            r#"{"id":5,"callback":{"cb":2,"args":[1, 2],"kwargs":{"$dict":[]}}}"#
        );
        for bad in [
            // The red team's frame: a reply and a callback at once.
            r#"{"id":1,"ok":null,"callback":{}}"#,
            r#"{"id":1,"ok":null,"op":"started"}"#,
            r#"{"id":1,"ok":null,"err":null}"#,
            r#"{"id":1,"ok":1,"ok":2}"#,
            r#"{"id":1,"ok":null,"subject_ns":0}"#,
            r#"{"id":1,"ok":null,"fault":"timeout"}"#,
            r#"{"id":1,"ok":null,"group":1}"#,
            r#"{"id":1}"#,
            r#"{"ok":null}"#,
            r#"{"id":"1","ok":null}"#,
            r#"{"id":-1,"ok":null}"#,
            r#"{"id":1.0,"ok":null}"#,
            r#"{"id":1,"callback":null}"#,
            r#"{"id":1,"callback":{"cb":1,"args":[]}}"#,
            r#"{"id":1,"callback":{"cb":1,"args":[],"kwargs":{},"x":1}}"#,
            r#"{"id":1,"callback":{"cb":"1","args":[],"kwargs":{}}}"#,
            r#"{"id":1,"ok":NaN}"#,
            r#"{"id":1,"ok":[1,}"#,
            r#"{"id":1,"ok":"\ud800"}"#,
            r#"{"id":1,"ok":"\udc00\ud800"}"#,
            r#"{"id":1,"ok":{"\ud83d":1}}"#,
            r#"[1]"#,
        ] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn the_limits_are_the_codecs() {
        // The subject's and the judge's encoders stay within these: one set of limits.
        let codec = include_str!("../../../../runners/python/subject/infradev_wire.py");
        for line in [
            "MAX_FRAME = 64 * 1024 * 1024\n".to_owned(),
            format!("MAX_FRAME_DEPTH = {MAX_FRAME_DEPTH}\n"),
            "MAX_ANSWER = MAX_FRAME + (1 << 16)\n".to_owned(),
        ] {
            assert!(codec.contains(&line), "infradev_wire.py has no {line:?}");
        }
        assert_eq!(MAX_FRAME, 64 * 1024 * 1024);
        assert_eq!(MAX_TO_JUDGE, MAX_FRAME + (1 << 16));
    }

    fn nested(depth: usize) -> String {
        "[".repeat(depth) + &"]".repeat(depth)
    }

    #[test]
    fn frames_nest_up_to_the_canonical_depth_and_no_deeper() {
        // The payload is never built into a tree: serde_json's own recursion limit (128) does
        // not apply to it, only the protocol's.
        let at_limit = format!(r#"{{"id":1,"ok":{}}}"#, nested(MAX_FRAME_DEPTH - 1));
        assert_eq!(scan(at_limit.as_bytes()).depth, MAX_FRAME_DEPTH);
        assert!(parse(&at_limit).is_ok());
        let over = format!(r#"{{"id":1,"ok":{}}}"#, nested(MAX_FRAME_DEPTH));
        assert!(parse(&over).is_err());
        let req = format!(
            r#"{{"op":"call","id":1,"req":{}}}"#,
            nested(MAX_FRAME_DEPTH - 1)
        );
        assert!(JudgeFrame::parse(req.as_bytes()).is_ok());
        let req = format!(
            r#"{{"op":"call","id":1,"req":{}}}"#,
            nested(MAX_FRAME_DEPTH)
        );
        assert!(JudgeFrame::parse(req.as_bytes()).is_err());
        // Brackets inside strings are text.
        assert_eq!(scan(br#"{"a":"[[[{{\"]]"}"#).depth, 1);
    }

    #[test]
    fn requests_hand_out_the_callbacks_they_name() {
        let req = br#"{"op":"call","id":1,"req":{"op":"call","obj":{"$ref":2},
            "args":[{"$callback":3},"{\"$callback\":9}",{"$dict":[["$callback",{"$callback" : 4}]]}],
            "kwargs":{"$dict":[["f",{"\u0024callback":5}],["g",{"$callback":6.0}]]}}}"#;
        let (frame, callbacks) = JudgeFrame::parse(req).unwrap();
        assert_eq!(callbacks, vec![3, 4, 5]);
        assert!(frame.subject_call().is_some());
    }

    #[test]
    fn judge_frames_have_the_keys_of_their_kind() {
        let (f, _) = JudgeFrame::parse(br#"{"id":2,"callback_ok":null}"#).unwrap();
        assert_eq!(
            f.callback_answer().map(|(k, v)| (k, v.get())),
            Some(("callback_ok", "null"))
        );
        assert!(f.subject_call().is_none());
        let (f, _) = JudgeFrame::parse(br#"{"id":2,"callback_ok":1,"callback_err":2}"#).unwrap();
        assert!(f.callback_answer().is_none());
        let (f, _) =
            JudgeFrame::parse(br#"{"op":"event","id":2,"event":{"event":"start"}}"#).unwrap();
        assert!(f.callback_answer().is_none() && f.subject_call().is_none());
        let (f, _) = JudgeFrame::parse(br#"{"op":"call","id":2,"rank":0,"req":{}}"#).unwrap();
        assert!(f.subject_call().is_none());
        assert!(JudgeFrame::parse(br#"{"op":"call","id":2,"req":{},"extra":1}"#).is_err());
    }

    #[test]
    fn composite_rank_answers_are_composed_without_copies() {
        let a = parse(r#"{"id":9,"ok":[1,2]}"#).unwrap();
        let mut out = Composed::default();
        out.text("[");
        rank_entry(&mut out, Some(&a), 5);
        out.text(",");
        rank_entry(&mut out, None, 6);
        out.text("]");
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert_eq!(out.len(), text.len());
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            serde_json::json!([
                {"ok": [1, 2], "subject_ns": 5},
                {"err": {"builtin": "infradev.NotEncodable", "classes": []}, "subject_ns": 6},
            ])
        );
        let r = rank_reply(9, &a, 5, Some(2)).to_vec();
        assert_eq!(
            serde_json::from_slice::<Value>(&r).unwrap(),
            serde_json::json!({"id": 9, "ok": [1, 2], "subject_ns": 5, "group": 2})
        );
    }
}
