//! TensorBoard event files: TFRecord framing with masked CRC32C; scalars as `simple_value` or
//! one-element tensors. A truncated last record (a file still being written) ends reading.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::proto::{Fields, Wire, varint};
use super::{ReadError, Stream, to_step};
use serde_json::Value;

use super::context::json_scalar;
use crate::series::{Marker, RawRun};

/// One scalar read from an event file.
#[derive(Clone, Debug, PartialEq)]
pub struct TbScalar {
    /// Tag.
    pub tag: String,
    /// Step.
    pub step: u64,
    /// Value.
    pub value: f64,
}

fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    (crc.rotate_right(15)).wrapping_add(0xa282_ead8)
}

/// True when the bytes start with a valid TFRecord header.
pub fn looks_like_tfrecord(head: &[u8]) -> bool {
    if head.len() < 12 {
        return false;
    }
    let len_crc = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
    masked_crc(&head[..8]) == len_crc
}

/// The plugin a tag's summaries belong to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plugin {
    /// Scalars (or the scalar data class).
    Scalar,
    /// Text (`add_text`: a Trainer writes its arguments as `args/text_summary`).
    Text,
    /// Anything else (histograms, images, ...).
    Other,
}

/// Per-tag plugin knowledge, from the first summary of each tag that names its plugin.
type Plugins = HashMap<String, Plugin>;

/// Parses a whole event-file buffer, calling `sink(tag, step, value)` for each scalar.
/// Returns `Err((offset, reason))` on a corrupt record; a truncated tail ends cleanly.
pub fn parse_events(data: &[u8], mut sink: impl FnMut(&str, u64, f64)) -> Result<(), (u64, String)> {
    parse_records(data, &mut Plugins::new(), &mut sink, &mut |_, _| {}).map(|_| ())
}

/// Parses the complete records at the start of `data` (an event file from a record boundary),
/// calling `sink` for each scalar and `text` for each text summary; returns the bytes parsed (a
/// truncated last record, still being written, is left), or `(offset, reason)` of a corrupt one.
fn parse_records(
    data: &[u8],
    plugins: &mut Plugins,
    sink: &mut impl FnMut(&str, u64, f64),
    text: &mut impl FnMut(&str, &str),
) -> Result<usize, (u64, String)> {
    let mut pos = 0usize;
    while pos < data.len() {
        let Some(header) = data.get(pos..pos + 12) else {
            break; // truncated header: a file still being written
        };
        let len_bytes: [u8; 8] = header[..8]
            .try_into()
            .map_err(|_| (pos as u64, "header".to_string()))?;
        let len_crc = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if masked_crc(&len_bytes) != len_crc {
            return Err((pos as u64, "length checksum mismatch".to_string()));
        }
        let n = u64::from_le_bytes(len_bytes);
        let start = pos + 12;
        let Some(end) = usize::try_from(n).ok().and_then(|n| start.checked_add(n)) else {
            return Err((pos as u64, format!("record length {n} out of range")));
        };
        let Some(payload) = data.get(start..end) else {
            break; // truncated payload
        };
        let Some(crc_bytes) = data.get(end..end + 4) else {
            break; // truncated footer
        };
        let data_crc = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
        if masked_crc(payload) != data_crc {
            return Err((pos as u64, "data checksum mismatch".to_string()));
        }
        if !parse_event(payload, plugins, sink, text) {
            return Err((pos as u64, "malformed Event protobuf".to_string()));
        }
        pos = end + 4;
    }
    Ok(pos)
}

fn parse_event(
    buf: &[u8],
    plugins: &mut Plugins,
    sink: &mut impl FnMut(&str, u64, f64),
    text: &mut impl FnMut(&str, &str),
) -> bool {
    let mut step: i64 = 0;
    let mut summary: Option<&[u8]> = None;
    let mut fields = Fields::new(buf);
    for (f, w) in fields.by_ref() {
        match (f, w) {
            (2, Wire::Varint(v)) => step = v as i64,
            (5, Wire::Bytes(b)) => summary = Some(b),
            _ => {}
        }
    }
    if fields.error {
        return false;
    }
    let Some(summary) = summary else {
        return true;
    };
    let step = to_step(step as f64);
    let mut values = Fields::new(summary);
    for (f, w) in values.by_ref() {
        if let (1, Wire::Bytes(v)) = (f, w)
            && !parse_value(v, step, plugins, sink, text)
        {
            return false;
        }
    }
    !values.error
}

fn parse_value(
    buf: &[u8],
    step: u64,
    plugins: &mut Plugins,
    sink: &mut impl FnMut(&str, u64, f64),
    text: &mut impl FnMut(&str, &str),
) -> bool {
    let mut tag: &[u8] = &[];
    let mut simple: Option<f32> = None;
    let mut tensor: Option<&[u8]> = None;
    let mut plugin: Option<Plugin> = None;
    let mut fields = Fields::new(buf);
    for (f, w) in fields.by_ref() {
        match (f, w) {
            (1, Wire::Bytes(b)) => tag = b,
            (2, Wire::Fixed32(v)) => simple = Some(f32::from_bits(v)),
            (8, Wire::Bytes(b)) => tensor = Some(b),
            (9, Wire::Bytes(b)) => plugin = Some(plugin_of(b)),
            _ => {}
        }
    }
    if fields.error {
        return false;
    }
    let tag = String::from_utf8_lossy(tag);
    if let Some(v) = simple {
        sink(&tag, step, f64::from(v));
        return true;
    }
    if let Some(t) = tensor {
        let plugin = match plugin {
            Some(p) => {
                plugins.insert(tag.to_string(), p);
                p
            }
            None => plugins.get(tag.as_ref()).copied().unwrap_or(Plugin::Scalar),
        };
        match plugin {
            Plugin::Scalar => {
                if let Some(v) = tensor_scalar(t) {
                    sink(&tag, step, v);
                }
            }
            Plugin::Text => {
                if let Some(s) = tensor_text(t) {
                    text(&tag, &s);
                }
            }
            Plugin::Other => {}
        }
    }
    true
}

/// The first string of a string tensor (`string_val`), as UTF-8.
fn tensor_text(buf: &[u8]) -> Option<String> {
    Fields::new(buf).find_map(|(f, w)| match (f, w) {
        (8, Wire::Bytes(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    })
}

/// The plugin a SummaryMetadata names: the scalars plugin (or the scalar data class), the text
/// plugin, or another.
fn plugin_of(buf: &[u8]) -> Plugin {
    let mut plugin_name: Option<&[u8]> = None;
    let mut data_class = 0;
    for (f, w) in Fields::new(buf) {
        match (f, w) {
            (1, Wire::Bytes(pd)) => {
                for (g, x) in Fields::new(pd) {
                    if let (1, Wire::Bytes(n)) = (g, x) {
                        plugin_name = Some(n);
                    }
                }
            }
            (4, Wire::Varint(v)) => data_class = v,
            _ => {}
        }
    }
    match plugin_name {
        _ if data_class == 1 => Plugin::Scalar,
        None | Some(b"scalars") => Plugin::Scalar,
        Some(b"text") => Plugin::Text,
        Some(_) => Plugin::Other,
    }
}

fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((bits >> 10) & 0x1f);
    let frac = f64::from(bits & 0x3ff);
    match exp {
        0 => sign * frac * 2f64.powi(-24),
        31 => {
            if frac == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => sign * (1.0 + frac / 1024.0) * 2f64.powi(exp - 15),
    }
}

/// The single numeric element of a TensorProto, if it has exactly one.
fn tensor_scalar(buf: &[u8]) -> Option<f64> {
    let mut dtype = 0u64;
    let mut content: &[u8] = &[];
    let mut vals: Vec<f64> = Vec::new();
    let mut halves: Vec<u64> = Vec::new();
    let mut ints: Vec<f64> = Vec::new();
    for (f, w) in Fields::new(buf) {
        match (f, w) {
            (1, Wire::Varint(v)) => dtype = v,
            (4, Wire::Bytes(b)) => content = b,
            (5, Wire::Fixed32(v)) => vals.push(f64::from(f32::from_bits(v))),
            (5, Wire::Bytes(b)) => vals.extend(
                b.chunks_exact(4)
                    .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
            ),
            (6, Wire::Fixed64(v)) => vals.push(f64::from_bits(v)),
            (6, Wire::Bytes(b)) => vals.extend(
                b.chunks_exact(8)
                    .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])),
            ),
            (13, Wire::Varint(v)) => halves.push(v),
            (13, Wire::Bytes(b)) => {
                let mut p = 0;
                while p < b.len() {
                    halves.push(varint(b, &mut p)?);
                }
            }
            (7 | 10, Wire::Varint(v)) => ints.push(v as i64 as f64),
            (7 | 10, Wire::Bytes(b)) => {
                let mut p = 0;
                while p < b.len() {
                    ints.push(varint(b, &mut p)? as i64 as f64);
                }
            }
            _ => {}
        }
    }
    if !content.is_empty() {
        return match (dtype, content.len()) {
            (1, 4) => Some(f64::from(f32::from_le_bytes(content.try_into().ok()?))),
            (2, 8) => Some(f64::from_le_bytes(content.try_into().ok()?)),
            (19, 2) => Some(f16_to_f64(u16::from_le_bytes(content.try_into().ok()?))),
            (14, 2) => Some(f64::from(f32::from_bits(
                u32::from(u16::from_le_bytes(content.try_into().ok()?)) << 16,
            ))),
            (3, 4) => Some(f64::from(i32::from_le_bytes(content.try_into().ok()?))),
            (9, 8) => Some(i64::from_le_bytes(content.try_into().ok()?) as f64),
            _ => None,
        };
    }
    if vals.len() == 1 {
        return vals.first().copied();
    }
    if halves.len() == 1 {
        let h = halves[0] as u16;
        return Some(if dtype == 14 {
            f64::from(f32::from_bits(u32::from(h) << 16))
        } else {
            f16_to_f64(h)
        });
    }
    if ints.len() == 1 && matches!(dtype, 3 | 9 | 5 | 6 | 4) {
        return ints.first().copied();
    }
    None
}

/// The role of a split sub-folder (Keras writes `train/` and `validation/` event folders).
pub fn split_role(dir: &Path) -> Option<&'static str> {
    match dir.file_name()?.to_str()? {
        "train" | "training" => Some("train"),
        "validation" | "val" | "valid" | "eval" | "test" => Some("validation"),
        _ => None,
    }
}

fn event_files(dir: &Path) -> Result<Vec<std::path::PathBuf>, ReadError> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| super::io_err(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("events.out.tfevents"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// True when `dir` holds event files directly.
pub fn has_event_files(dir: &Path) -> bool {
    event_files(dir).is_ok_and(|f| !f.is_empty())
}

/// One event file read record by record as it grows, into its run (a folder's event files
/// share one); the tags of a `train/` or `validation/` sub-folder are prefixed with its role.
pub struct Events {
    path: PathBuf,
    role: Option<&'static str>,
    plugins: Plugins,
    /// Bytes parsed so far, for the offset of a corrupt record.
    parsed: u64,
    /// Its segment mark was made (or it needs none: its role's first file).
    started: bool,
    /// The Trainer's arguments were read (they are written once, at the start).
    args_read: bool,
}

impl Events {
    /// A reader at the start of the event file `path` of a run whose events have this role;
    /// `first` when no file of that role comes before it (it starts no segment: a Keras run's
    /// `validation/` file, written beside its `train/` one, continues nothing).
    pub fn new(path: &Path, role: Option<&'static str>, first: bool) -> Events {
        Events {
            path: path.to_path_buf(),
            role,
            plugins: Plugins::new(),
            parsed: 0,
            started: first,
            args_read: false,
        }
    }
}

impl Stream for Events {
    fn feed(&mut self, run: &mut RawRun, data: &[u8], eof: bool) -> Result<usize, ReadError> {
        if !self.started {
            self.started = true;
            // Each later event file of a role is a segment (a resumed job writes a new one); a
            // tag that continues in it is cut there.
            run.mark_segment(Some(Marker::NewFile), None);
        }
        let mut args: Option<String> = None;
        let mut keep_args = |tag: &str, text: &str| {
            if tag == TRAINER_ARGS {
                args.get_or_insert_with(|| text.to_string());
            }
        };
        let role = self.role;
        let mut push = |tag: &str, step: u64, v: f64| match role {
            None => run.push(tag, step, v),
            Some(r) => run.push(&format!("{r}/{tag}"), step, v),
        };
        let used = parse_records(data, &mut self.plugins, &mut push, &mut keep_args).map_err(
            |(offset, reason)| ReadError::Corrupt {
                path: self.path.clone(),
                offset: self.parsed + offset,
                reason,
            },
        )?;
        // At the end of a one-off read, bytes left unparsed are a record cut short (in a file
        // that is followed, a record still being written): the rest of the file is not read.
        if eof && used < data.len() {
            let at = self.parsed + used as u64;
            let cut = crate::series::Partial::record_cut_short(&self.path, at, data.len() - used);
            if at == 0 {
                return Err(ReadError::Corrupt {
                    path: self.path.clone(),
                    offset: 0,
                    reason: format!("truncated: {}", cut.what),
                });
            }
            run.hints.partial.push(cut);
        }
        self.parsed += used as u64;
        if !self.args_read
            && let Some(Value::Object(m)) = args.and_then(|a| serde_json::from_str::<Value>(&a).ok())
        {
            self.args_read = true;
            for (k, v) in &m {
                if let Some(v) = json_scalar(v) {
                    run.hints.setup.absorb(k, &v, "TensorBoard args/text_summary");
                }
            }
        }
        Ok(used)
    }

    fn finish(&self, run: &mut RawRun) {
        set_unit(run);
    }
}

/// The tag a Hugging Face Trainer writes its `TrainingArguments` (as JSON) under.
const TRAINER_ARGS: &str = "args/text_summary";

/// Keras-style `epoch_loss` tags are logged per epoch.
fn set_unit(run: &mut RawRun) {
    if run
        .tags
        .iter()
        .any(|(t, _)| t.rsplit('/').next().is_some_and(|b| b.starts_with("epoch_")))
    {
        run.hints.x_unit = crate::series::XUnit::Epoch;
    }
}

/// An event file and the role of its folder (`train`, `validation`, or none).
pub type EventFile = (PathBuf, Option<&'static str>);

/// The run a TensorBoard log reads into and its event files in reading order: one event file
/// (the run named after its folder), or every event file of a folder and of its `train/` /
/// `validation/` sub-folders.
pub fn source(path: &Path) -> Result<(RawRun, Vec<EventFile>), ReadError> {
    if !path.is_dir() {
        let parent = path.parent();
        let role = parent.and_then(split_role);
        let name_dir = if role.is_some() {
            parent.and_then(Path::parent)
        } else {
            parent
        };
        let name = name_dir
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let run = RawRun::new(name, path.display().to_string(), "tensorboard");
        return Ok((run, vec![(path.to_path_buf(), role)]));
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    let run = RawRun::new(name, path.display().to_string(), "tensorboard");
    let role = split_role(path);
    let mut files: Vec<EventFile> = event_files(path)?.into_iter().map(|f| (f, role)).collect();
    if role.is_none() {
        let mut subs: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| super::io_err(path, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect();
        subs.sort();
        for sub in subs {
            if let Some(r) = split_role(&sub) {
                files.extend(event_files(&sub)?.into_iter().map(|f| (f, Some(r))));
            }
        }
    }
    Ok((run, files))
}
