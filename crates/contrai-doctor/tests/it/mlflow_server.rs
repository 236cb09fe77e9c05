//! MLflow tracking servers read over REST: a run by its id, an experiment by its name, the
//! run's parameters as its setup, histories fetched page by page, NaN as MLflow writes it, a run
//! followed while points arrive (only the metrics that moved fetched again), and the server's own
//! words when it says no. The server here answers as MLflow's does (its JSON, recorded from
//! `mlflow server` 3.17); a real one, with runs logged by `mlflow`, is read in the Python
//! package's tests (`test_tracking_servers.py`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use contrai_doctor::{ReadError, Series, Tail, read_path};
use serde_json::{Value, json};

const RUN: &str = "bd32da37e96841de808dd77fa09c1116";

/// A run's metrics as a server holds them: key → (step, value) points.
#[derive(Default)]
struct Store {
    metrics: Vec<(String, Vec<(u64, f64)>)>,
    /// Requests served, as `METHOD path?query`.
    asked: Vec<String>,
}

impl Store {
    fn point(&mut self, key: &str, step: u64, value: f64) {
        match self.metrics.iter_mut().find(|(k, _)| k == key) {
            Some((_, p)) => p.push((step, value)),
            None => self.metrics.push((key.into(), vec![(step, value)])),
        }
    }

    fn metric_json(key: &str, (step, value): (u64, f64)) -> Value {
        // MLflow writes NaN as a string, int64s as numbers or (protobuf's JSON) as strings.
        let value = if value.is_nan() {
            json!("NaN")
        } else {
            json!(value)
        };
        json!({"key": key, "value": value, "timestamp": (1_700_000_000_000 + step).to_string(), "step": step})
    }

    fn run_json(&self) -> Value {
        let latest: Vec<Value> = (self.metrics.iter())
            .map(|(k, p)| Store::metric_json(k, *p.last().unwrap()))
            .collect();
        json!({
            "info": {"run_id": RUN, "run_name": "bert-sst2", "experiment_id": "1", "status": "RUNNING"},
            "data": {
                "metrics": latest,
                "params": [{"key": "learning_rate", "value": "5e-05"}, {"key": "lr_scheduler_type", "value": "constant"},
                           {"key": "per_device_train_batch_size", "value": "16"}],
                "tags": [{"key": "mlflow.runName", "value": "bert-sst2"}]
            }
        })
    }

    /// The answer to one request: status and JSON body.
    fn answer(&mut self, method: &str, target: &str) -> (u16, Value) {
        self.asked.push(format!("{method} {target}"));
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let arg = |name: &str| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                .map(|v| v.replace("%2F", "/"))
        };
        match path {
            "/api/2.0/mlflow/runs/get" if arg("run_id").as_deref() == Some(RUN) => {
                (200, json!({"run": self.run_json()}))
            }
            "/api/2.0/mlflow/runs/get" => (
                404,
                json!({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": format!("Run with id={} not found", arg("run_id").unwrap_or_default())}),
            ),
            "/api/2.0/mlflow/experiments/get-by-name"
                if arg("experiment_name").as_deref() == Some("sst2") =>
            {
                (200, json!({"experiment": {"experiment_id": "1", "name": "sst2"}}))
            }
            "/api/2.0/mlflow/experiments/get-by-name" => (
                404,
                json!({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Could not find experiment with name 'nope'"}),
            ),
            "/api/2.0/mlflow/runs/search" => (200, json!({"runs": [self.run_json()]})),
            "/api/2.0/mlflow/metrics/get-history" => {
                let key = arg("metric_key").unwrap_or_default();
                let points = (self.metrics.iter().find(|(k, _)| *k == key))
                    .map(|(_, p)| p.clone())
                    .unwrap_or_default();
                // Pages of 50 points: the reader must follow `next_page_token`.
                let from: usize = arg("page_token").and_then(|t| t.parse().ok()).unwrap_or(0);
                let page: Vec<Value> = points
                    .iter()
                    .skip(from)
                    .take(50)
                    .map(|p| Store::metric_json(&key, *p))
                    .collect();
                let mut body = json!({"metrics": page});
                if from + 50 < points.len() {
                    body["next_page_token"] = json!((from + 50).to_string());
                }
                (200, body)
            }
            _ => (
                404,
                json!({"error_code": "ENDPOINT_NOT_FOUND", "message": "no such endpoint"}),
            ),
        }
    }
}

/// Serves `store` over HTTP on a free port; returns the port.
fn serve(store: Arc<Mutex<Store>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let store = store.clone();
            std::thread::spawn(move || {
                conn.set_read_timeout(Some(Duration::from_secs(5))).ok();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut parts = line.split_whitespace();
                    let (method, target) = (
                        parts.next().unwrap_or("").to_string(),
                        parts.next().unwrap_or("").to_string(),
                    );
                    let mut length = 0;
                    loop {
                        let mut h = String::new();
                        reader.read_line(&mut h).unwrap();
                        if h.trim().is_empty() {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let (status, json) = store.lock().unwrap().answer(&method, &target);
                    let text = json.to_string();
                    let head = format!(
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        text.len()
                    );
                    conn.write_all(head.as_bytes()).unwrap();
                    conn.write_all(text.as_bytes()).unwrap();
                }
            });
        }
    });
    port
}

/// A Trainer's run: train loss every 5 steps to `to`, eval loss every 50 that turns up after 300.
fn log(store: &mut Store, from: u64, to: u64) {
    for s in (from..=to).step_by(5) {
        store.point("train_loss", s, 0.9 * (-(s as f64) / 150.0).exp() + 0.02);
        if s % 50 == 0 && s > 0 {
            let x = s as f64 / 100.0;
            store.point("eval_loss", s, 0.5 + 0.04 * (x - 3.0).powi(2));
        }
    }
}

#[test]
fn a_run_on_a_server_reads_with_its_params_as_setup() {
    let store = Arc::new(Mutex::new(Store::default()));
    log(&mut store.lock().unwrap(), 0, 600);
    store.lock().unwrap().point("grad_norm", 1, f64::NAN);
    let port = serve(store.clone());
    let runs = read_path(format!("mlflow://127.0.0.1:{port}/{RUN}").as_ref(), None).unwrap();
    assert_eq!(runs.len(), 1);
    let run = &runs[0];
    assert_eq!(
        (run.name.as_str(), run.format.as_str()),
        ("bert-sst2", "mlflow_server")
    );
    assert_eq!(
        run.source,
        format!("http://127.0.0.1:{port}/#/experiments/1/runs/{RUN}")
    );
    // 121 points over three pages of history.
    assert_eq!(run.points(Series::TrainLoss).len(), 121);
    assert_eq!(run.points(Series::ValLoss).len(), 12);
    assert!(run.points(Series::GradNorm)[0].value.is_nan());
    let setup = &run.hints.setup;
    assert_eq!((setup.peak_lr, setup.batch_size), (Some(5e-5), Some(16)));
    assert!(setup.settings.iter().all(|s| s.file == "MLflow params"));
    // The experiment by its name gives the same run.
    let by_name = read_path(format!("mlflow://127.0.0.1:{port}/sst2").as_ref(), None).unwrap();
    assert_eq!(
        by_name[0].points(Series::TrainLoss),
        run.points(Series::TrainLoss)
    );
}

#[test]
fn a_followed_run_fetches_only_what_moved() {
    let store = Arc::new(Mutex::new(Store::default()));
    log(&mut store.lock().unwrap(), 0, 200);
    let port = serve(store.clone());
    let mut tail = Tail::new(format!("mlflow://127.0.0.1:{port}/{RUN}").as_ref(), None);
    assert!(tail.poll().unwrap());
    let first = tail.runs().unwrap();
    assert_eq!(first[0].points(Series::TrainLoss).last().unwrap().step, 200);
    // Polled again at once: the server is not asked (a live view spaces its reads).
    let asked = store.lock().unwrap().asked.len();
    assert!(!tail.poll().unwrap());
    assert_eq!(store.lock().unwrap().asked.len(), asked);
    // New train points only: its history alone is fetched again.
    {
        let mut s = store.lock().unwrap();
        for step in (205..=240).step_by(5) {
            s.point("train_loss", step, 0.1);
        }
        s.asked.clear();
    }
    std::thread::sleep(Duration::from_millis(2100));
    assert!(tail.poll().unwrap());
    let runs = tail.runs().unwrap();
    assert_eq!(runs[0].points(Series::TrainLoss).last().unwrap().step, 240);
    assert_eq!(runs[0].points(Series::ValLoss).len(), 4);
    let asked = store.lock().unwrap().asked.clone();
    assert!(
        asked.iter().any(|a| a.contains("metric_key=train_loss")),
        "{asked:?}"
    );
    assert!(
        !asked.iter().any(|a| a.contains("metric_key=eval_loss")),
        "{asked:?}"
    );
    // Nothing new: nothing changed.
    std::thread::sleep(Duration::from_millis(2100));
    assert!(!tail.poll().unwrap());
}

#[test]
fn the_servers_refusal_is_said_in_its_own_words() {
    let port = serve(Arc::new(Mutex::new(Store::default())));
    let missing = "0123456789abcdef0123456789abcdef";
    match read_path(format!("mlflow://127.0.0.1:{port}/{missing}").as_ref(), None) {
        Err(ReadError::Remote { url, reason }) => {
            assert_eq!(url, format!("mlflow://127.0.0.1:{port}/{missing}"));
            assert!(
                reason.contains("HTTP 404") && reason.contains(&format!("Run with id={missing} not found")),
                "{reason}"
            );
        }
        other => panic!("expected the server's 404, got {other:?}"),
    }
    let err = read_path(format!("mlflow://127.0.0.1:{port}/nope").as_ref(), None).unwrap_err();
    assert!(
        err.to_string()
            .contains("Could not find experiment with name 'nope'"),
        "{err}"
    );
    // No server there: said, with what to check.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = read_path(format!("mlflow://127.0.0.1:{closed}/{RUN}").as_ref(), None).unwrap_err();
    assert!(
        err.to_string().contains("is `mlflow server` running there?"),
        "{err}"
    );
}
