//! `settee bench --quick` end to end: a real Settee server (started like
//! every e2e test) is measured by the real binary over EVERY scenario,
//! including fault tolerance (`--spawn-settee`: the bench starts and
//! SIGKILLs its own settee servers). Asserts, from the JSON report, that
//! every scenario produced samples, that no request failed where failures
//! are not part of the experiment, and that no acknowledged write was lost.
//! Plots and tables are checked for presence.

mod bench_support;
mod common;

use std::time::{Duration, Instant};

use bench_support::bench;
use common::{Server, ADMIN};
use serde_json::Value;

#[test]
fn quick_run_of_every_scenario() {
    let server = Server::start();
    let url = format!("http://{}:{}@127.0.0.1:{}", ADMIN.0, ADMIN.1, server.port);
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("bench.json");
    let plots = tmp.path().join("plots");
    let started = Instant::now();
    let (ok, out, err) = bench(
        &[
            "--url",
            &url,
            "--quick",
            "--spawn-settee",
            "--json",
            json.to_str().unwrap(),
            "--plots",
            plots.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    let took = started.elapsed();
    assert!(ok, "bench failed\nstdout:\n{out}\nstderr:\n{err}");
    assert!(!out.contains(ADMIN.1), "the password must not be printed");
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let results = report["results"].as_array().unwrap();

    // Every scenario of the table produced at least one row with samples.
    let (list_ok, list, _) = bench(&["--list"], Duration::from_secs(30));
    assert!(list_ok);
    let scenarios: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(scenarios.len() >= 25, "{list}");
    for s in &scenarios {
        let rows: Vec<&Value> = results.iter().filter(|r| r["scenario"] == *s).collect();
        assert!(!rows.is_empty(), "scenario {s} produced no result:\n{out}");
        for r in rows {
            let sum = &r["summary"];
            assert!(sum["samples"].as_u64().unwrap() > 0, "{s}: no samples: {r}");
            assert!(
                sum["throughput"].as_f64().unwrap() > 0.0,
                "{s}: no throughput: {r}"
            );
            if r["errors_expected"] == false {
                assert_eq!(sum["errors"], 0, "{s}: unexpected errors: {r}");
            }
        }
    }
    for row in [
        "bulk_doc_1000",
        "benchbulk",
        "single_doc_insert",
        "batch_ok_doc_insert",
        "concurrent_writers_1000",
        "random_reads_1",
        "random_reads_32",
        "spike_before",
        "spike_during",
        "spike_after",
        "all_docs_page_50",
        "all_docs_page_200",
        "all_docs_page_2000",
        "copy",
        "copy_tools_copy",
        "copy_tools_copy_fixed_50",
        "copy_tools_copy_fixed_200",
        "copy_tools_copy_fixed_2000",
        "copy_tools_pipeline_50",
        "copy_tools_pipeline_200",
        "copy_tools_pipeline_2000",
        "ids_sequential",
        "ids_random",
        "lightning",
        "fault_tolerance",
        "fsync_floor",
    ] {
        assert!(results.iter().any(|r| r["name"] == row), "no row {row}");
    }
    // Fault tolerance: rounds ran, nothing acknowledged was lost.
    let fault = results
        .iter()
        .find(|r| r["name"] == "fault_tolerance")
        .unwrap();
    assert_eq!(fault["extra"]["lost"], 0, "{fault}");
    assert_eq!(fault["extra"]["lost_checks_total"], 0, "{fault}");
    assert!(
        fault["extra"]["acked_writes"].as_u64().unwrap() > 0,
        "{fault}"
    );
    assert_eq!(fault["extra"]["recovery_ms"].as_array().unwrap().len(), 2);
    // The operator tools: every variant copied everything, and the copy row
    // carries the curve and its ratio to the best fixed page size.
    let tools = results
        .iter()
        .find(|r| r["name"] == "copy_tools_copy")
        .unwrap();
    assert_eq!(
        tools["extra"]["curve"].as_array().unwrap().len(),
        3,
        "{tools}"
    );
    assert_eq!(
        tools["extra"]["copy_curve"].as_array().unwrap().len(),
        3,
        "{tools}"
    );
    assert!(
        tools["extra"]["ratio_copy_to_best"].as_f64().unwrap() > 0.0,
        "{tools}"
    );
    assert!(tools["extra"]["within_10pct"].is_boolean(), "{tools}");
    for r in results.iter().filter(|r| r["scenario"] == "copy_tools") {
        assert_eq!(r["summary"]["items"], 5000, "{r}");
    }
    // Sizes are reported for the ids scenario; the spike has a timeline.
    let ids = results.iter().find(|r| r["name"] == "ids_random").unwrap();
    assert!(ids["extra"]["file_bytes"].as_u64().is_some(), "{ids}");
    let spike = results
        .iter()
        .find(|r| r["name"] == "spike_during")
        .unwrap();
    assert_eq!(spike["extra"]["timeline"].as_array().unwrap().len(), 40);
    // The tables, targets and plots.
    for needle in [
        "| row | server | samples | throughput",
        "## Side by side",
        "## Settee targets",
        "client CPU",
        "## Serial durable writes vs the disk",
        "× fsync floor p50",
    ] {
        assert!(out.contains(needle), "no {needle:?} in:\n{out}");
    }
    for plot in [
        "throughput_vs_batch_size.svg",
        "throughput_vs_page_size.svg",
        "copy_tools_vs_page_size.svg",
        "latency_settee.svg",
        "spike_p99_latency.svg",
        "spike_throughput.svg",
    ] {
        let svg =
            std::fs::read_to_string(plots.join(plot)).unwrap_or_else(|e| panic!("{plot}: {e}"));
        assert!(svg.contains("<svg") && svg.contains("<text"), "{plot}");
    }
    // The bench cleaned up after itself.
    let dbs = server.admin("GET", "/_all_dbs", None).json();
    let leftover: Vec<&str> = dbs
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|d| d.as_str())
        .filter(|d| !d.starts_with('_'))
        .collect();
    assert_eq!(leftover, Vec::<&str>::new(), "leftover databases");
    eprintln!("quick bench of {} scenarios took {took:?}", scenarios.len());
}
