//! MLflow tracking servers (`mlflow server`), read over their REST API: `mlflow://HOST:PORT/ID`
//! names a run (its 32-hex id) or an experiment (its id or name); `mlflow://HOST:PORT/` every
//! run there. A run is read into the same [`Stored`] form as the file store's, so the same rules
//! read it; followed, only the metrics whose latest point moved are fetched again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::ReadError;
use super::json_tolerant::{parse_tolerant, value_f64};
use super::mlflow::{Row, Stored};
use crate::series::Run;

/// The scheme of a tracking server's location.
pub const SCHEME: &str = "mlflow://";
/// Points of a metric's history asked for at once (MLflow's own page size for histories).
const PAGE: u32 = 25_000;
/// Runs asked for at once by a search.
const RUNS_PAGE: u32 = 1_000;
/// A request that takes longer is an error (a server that hangs is said, not waited on).
const TIMEOUT: Duration = Duration::from_secs(60);
/// The least time between two reads of a followed server: a live view does not hammer it.
const SPACING: Duration = Duration::from_secs(2);
/// The largest answer read (a history of millions of points).
const MAX_BODY: u64 = 1 << 30;

/// What on a server is read.
#[derive(Clone, Debug, PartialEq)]
enum Target {
    Run(String),
    Experiment(String),
    All,
}

/// A run, an experiment or every run, on one tracking server.
#[derive(Clone, Debug, PartialEq)]
pub struct Location {
    /// `http://HOST:PORT[/PREFIX]`: where the REST API's `api/2.0/mlflow/` is.
    base: String,
    target: Target,
}

impl Location {
    /// The location `text` names (`mlflow://HOST:PORT[/PREFIX]/[ID]`), `None` when it names no
    /// tracking server.
    pub fn parse(text: &str) -> Option<Location> {
        let rest = text.strip_prefix(SCHEME)?;
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (prefix, id) = path.rsplit_once('/').unwrap_or(("", path));
        let target = match id {
            "" => Target::All,
            id if is_run_id(id) => Target::Run(id.to_string()),
            id => Target::Experiment(id.to_string()),
        };
        let prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("/{prefix}")
        };
        Some(Location {
            base: format!("http://{host}{prefix}"),
            target,
        })
    }

    /// The location of `id` (a run or an experiment; empty: every run) on the server whose
    /// tracking URI is `uri` (`http://HOST:PORT[/PREFIX]`, as `MLFLOW_TRACKING_URI` gives it).
    pub fn on(uri: &str, id: &str) -> Result<PathBuf, String> {
        let uri = uri.trim().trim_end_matches('/');
        if uri.starts_with("https://") {
            return Err(format!(
                "{uri}: https tracking servers are not read by this build (no TLS): reach the server \
                 over http (inside its network, or through `ssh -L PORT:HOST:PORT`)"
            ));
        }
        let Some(server) = uri.strip_prefix("http://") else {
            return Err(format!(
                "{uri}: not a tracking server's URI (expected http://HOST:PORT; a file store is read \
                 as a folder: `contrai doctor mlruns/`)"
            ));
        };
        Ok(PathBuf::from(format!("{SCHEME}{server}/{id}")))
    }

    fn url(&self, endpoint: &str) -> String {
        format!("{}/api/2.0/mlflow/{endpoint}", self.base)
    }

    /// The page of MLflow's own UI that shows a run.
    fn run_page(&self, experiment: &str, run: &str) -> String {
        format!("{}/#/experiments/{experiment}/runs/{run}", self.base)
    }
}

/// Whether `id` is a run's id (32 hex digits) rather than an experiment's id or name.
fn is_run_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// An int64 of MLflow's JSON: a number, or a string of one (protobuf's JSON writes int64 so).
fn json_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_f64().map(super::to_step)),
        Value::String(s) => s.parse::<i64>().ok().map(|i| i.max(0) as u64),
        _ => None,
    }
}

/// The token of an answer's next page, when there is one.
fn next_page(v: &Value) -> Option<String> {
    v["next_page_token"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string)
}

fn json_str(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// A run as a server last gave it: what it holds, and each metric's latest point then.
struct Cached {
    id: String,
    page: String,
    stored: Stored,
    latest: BTreeMap<String, (u64, u64, u64)>,
}

/// A tracking server's runs, read and followed.
pub(crate) struct Server {
    loc: Location,
    shown: String,
    agent: ureq::Agent,
    auth: Option<String>,
    runs: Vec<Cached>,
    last: Option<Instant>,
    bytes: u64,
}

impl Server {
    /// A reader of `loc` (`shown`: the location as the user wrote it, for errors). MLflow's own
    /// variables give the credentials: `MLFLOW_TRACKING_TOKEN`, else
    /// `MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD`.
    pub fn new(loc: Location, shown: &Path) -> Server {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(TIMEOUT))
            .http_status_as_error(false)
            .build()
            .new_agent();
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let auth = env("MLFLOW_TRACKING_TOKEN")
            .map(|t| format!("Bearer {t}"))
            .or_else(|| {
                let (u, p) = (env("MLFLOW_TRACKING_USERNAME")?, env("MLFLOW_TRACKING_PASSWORD")?);
                Some(format!(
                    "Basic {}",
                    data_encoding::BASE64.encode(format!("{u}:{p}").as_bytes())
                ))
            });
        Server {
            loc,
            shown: shown.display().to_string(),
            agent,
            auth,
            runs: Vec::new(),
            last: None,
            bytes: 0,
        }
    }

    /// Bytes the server sent so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// Reads what changed on the server since the last poll (at most one read in [`SPACING`]
    /// while followed); true when anything did.
    pub fn poll(&mut self, once: bool) -> Result<bool, ReadError> {
        if !once && self.last.is_some_and(|t| t.elapsed() < SPACING) {
            return Ok(false);
        }
        self.last = Some(Instant::now());
        let found = self.list()?;
        let mut changed = found.len() != self.runs.len();
        let mut runs = Vec::with_capacity(found.len());
        for run in found {
            let id = json_str(&run["info"]["run_id"]);
            let was = self
                .runs
                .iter()
                .position(|c| c.id == id)
                .map(|i| self.runs.swap_remove(i));
            let (cached, c) = self.update(was, &run)?;
            changed |= c;
            runs.push(cached);
        }
        self.runs = runs;
        Ok(changed)
    }

    /// The runs read so far.
    pub fn runs(&self) -> Vec<Run> {
        self.runs
            .iter()
            .flat_map(|c| c.stored.clone().into_raw("mlflow_server").into_runs())
            .collect()
    }

    /// The runs of the target, each as the server describes it (info and latest data).
    fn list(&mut self) -> Result<Vec<Value>, ReadError> {
        let experiments = match self.loc.target.clone() {
            Target::Run(id) => {
                let v = self.get("runs/get", &[("run_id", &id)])?;
                return Ok(vec![v["run"].clone()]);
            }
            Target::Experiment(e) => vec![self.experiment_id(&e)?],
            Target::All => self.experiment_ids()?,
        };
        let mut runs = Vec::new();
        for ids in experiments.chunks(100) {
            let body = json!({"experiment_ids": ids, "max_results": RUNS_PAGE});
            runs.extend(self.search("runs/search", body, "runs")?);
        }
        Ok(runs)
    }

    /// The id of an experiment named by its id or its name.
    fn experiment_id(&mut self, e: &str) -> Result<String, ReadError> {
        if e.bytes().all(|b| b.is_ascii_digit())
            && let Ok(v) = self.get("experiments/get", &[("experiment_id", e)])
        {
            return Ok(json_str(&v["experiment"]["experiment_id"]));
        }
        let v = self.get("experiments/get-by-name", &[("experiment_name", e)])?;
        Ok(json_str(&v["experiment"]["experiment_id"]))
    }

    /// Every active experiment's id.
    fn experiment_ids(&mut self) -> Result<Vec<String>, ReadError> {
        let found = self.search(
            "experiments/search",
            json!({"max_results": RUNS_PAGE}),
            "experiments",
        )?;
        Ok(found.iter().map(|e| json_str(&e["experiment_id"])).collect())
    }

    /// Every item (`items`: the answer's list) a search `endpoint` finds for `body`, page by page.
    fn search(&mut self, endpoint: &str, mut body: Value, items: &str) -> Result<Vec<Value>, ReadError> {
        let mut found = Vec::new();
        loop {
            let v = self.post(endpoint, &body)?;
            found.extend(v[items].as_array().cloned().unwrap_or_default());
            match next_page(&v) {
                Some(t) => body["page_token"] = Value::String(t),
                None => return Ok(found),
            }
        }
    }

    /// A run read again: the histories of the metrics whose latest point moved fetched anew.
    fn update(&mut self, was: Option<Cached>, run: &Value) -> Result<(Cached, bool), ReadError> {
        let info = &run["info"];
        let id = json_str(&info["run_id"]);
        let pairs = |v: &Value| -> Vec<(String, String)> {
            let mut out: Vec<_> = (v.as_array().into_iter().flatten())
                .map(|p| (json_str(&p["key"]), json_str(&p["value"])))
                .collect();
            out.sort();
            out
        };
        let latest: BTreeMap<String, (u64, u64, u64)> =
            (run["data"]["metrics"].as_array().into_iter().flatten())
                .map(|m| {
                    let point = (
                        json_u64(&m["step"]).unwrap_or(0),
                        json_u64(&m["timestamp"]).unwrap_or(0),
                        value_f64(&m["value"]).unwrap_or(f64::NAN).to_bits(),
                    );
                    (json_str(&m["key"]), point)
                })
                .collect();
        let mut cached = was.unwrap_or_else(|| Cached {
            id: id.clone(),
            page: self
                .loc
                .run_page(info["experiment_id"].as_str().unwrap_or("0"), &id),
            stored: Stored::default(),
            latest: BTreeMap::new(),
        });
        let mut changed = cached.latest != latest;
        let params = pairs(&run["data"]["params"]);
        let tags = pairs(&run["data"]["tags"]);
        changed |= cached.stored.params != params || cached.stored.tags != tags;
        let moved: Vec<String> = (latest.iter())
            .filter(|(k, p)| cached.latest.get(*k) != Some(p))
            .map(|(k, _)| k.clone())
            .collect();
        let mut metrics = std::mem::take(&mut cached.stored.metrics);
        metrics.retain(|k, _| latest.contains_key(k));
        for key in moved {
            metrics.insert(key.clone(), self.history(&id, &key)?);
        }
        cached.stored = Stored {
            id: id.clone(),
            name: info["run_name"].as_str().map(str::to_string),
            source: cached.page.clone(),
            params,
            tags,
            metrics,
        };
        cached.latest = latest;
        Ok((cached, changed))
    }

    /// A metric's whole history, page by page.
    fn history(&mut self, run: &str, key: &str) -> Result<Vec<Row>, ReadError> {
        let mut rows = Vec::new();
        let mut token = String::new();
        let page = PAGE.to_string();
        loop {
            let mut query = vec![
                ("run_id", run),
                ("metric_key", key),
                ("max_results", page.as_str()),
            ];
            if !token.is_empty() {
                query.push(("page_token", token.as_str()));
            }
            let v = self.get("metrics/get-history", &query)?;
            for m in v["metrics"].as_array().into_iter().flatten() {
                rows.push(Row {
                    line: rows.len() + 1,
                    timestamp: json_u64(&m["timestamp"]).unwrap_or(0),
                    step: json_u64(&m["step"]).unwrap_or(0),
                    value: value_f64(&m["value"]).unwrap_or(f64::NAN),
                });
            }
            match next_page(&v) {
                Some(t) => token = t,
                None => return Ok(rows),
            }
        }
    }

    fn get(&mut self, endpoint: &str, query: &[(&str, &str)]) -> Result<Value, ReadError> {
        let url = self.loc.url(endpoint);
        let mut req = self.agent.get(&url).query_pairs(query.iter().copied());
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let res = req.call();
        self.answer(&url, res)
    }

    fn post(&mut self, endpoint: &str, body: &Value) -> Result<Value, ReadError> {
        let url = self.loc.url(endpoint);
        let mut req = self.agent.post(&url).header("Content-Type", "application/json");
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let res = req.send(body.to_string());
        self.answer(&url, res)
    }

    /// The JSON a request was answered with, or why there is none (the server's own message).
    fn answer(
        &mut self,
        url: &str,
        res: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<Value, ReadError> {
        let err = |reason: String| ReadError::Remote {
            url: self.shown.clone(),
            reason,
        };
        let mut res = res.map_err(|e| {
            err(format!(
                "{url}: {e} (is `mlflow server` running there? `contrai doctor` reads a tracking server over http)"
            ))
        })?;
        let status = res.status().as_u16();
        let text = (res.body_mut().with_config().limit(MAX_BODY).read_to_string())
            .map_err(|e| err(format!("{url}: reading the answer: {e}")))?;
        self.bytes += text.len() as u64;
        let v = parse_tolerant(&text);
        if status != 200 {
            let said = (v.as_ref().ok())
                .and_then(|v| v["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| text.chars().take(200).collect());
            let hint = match status {
                401 | 403 => {
                    " (set MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)"
                }
                _ => "",
            };
            return Err(err(format!("{url}: HTTP {status}: {said}{hint}")));
        }
        v.map_err(|e| err(format!("{url}: the answer is not JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_name_a_run_an_experiment_or_every_run() {
        let run = "0123456789abcdef0123456789abcdef";
        let l = Location::parse(&format!("mlflow://127.0.0.1:5000/{run}")).unwrap();
        assert_eq!(
            (l.base.as_str(), l.target),
            ("http://127.0.0.1:5000", Target::Run(run.into()))
        );
        let l = Location::parse("mlflow://host:5000/team/mlflow/bert-sweep").unwrap();
        assert_eq!(l.base, "http://host:5000/team/mlflow");
        assert_eq!(l.target, Target::Experiment("bert-sweep".into()));
        assert_eq!(Location::parse("mlflow://host:5000").unwrap().target, Target::All);
        assert_eq!(
            Location::parse("mlflow://host:5000/").unwrap().target,
            Target::All
        );
        assert!(Location::parse("runs/x").is_none());
        assert_eq!(
            Location::on("http://h:5000/", "3").unwrap(),
            PathBuf::from("mlflow://h:5000/3")
        );
        assert!(Location::on("https://h", "3").unwrap_err().contains("no TLS"));
        assert!(
            Location::on("databricks", "3")
                .unwrap_err()
                .contains("http://HOST:PORT")
        );
    }

    #[test]
    fn int64s_come_as_numbers_or_strings() {
        assert_eq!(json_u64(&json!("1700000000000")), Some(1_700_000_000_000));
        assert_eq!(json_u64(&json!(12)), Some(12));
        assert_eq!(json_u64(&json!("-3")), Some(0));
    }
}
