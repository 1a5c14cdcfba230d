//! Plots (SVG, via plotters' SVG backend: text is emitted as `<text>`
//! elements, so no system font libraries are needed): throughput vs
//! `_bulk_docs` batch size, throughput vs `_all_docs` page size, latency
//! percentiles per server, and the spike timeline. One file per plot in the
//! `--plots` directory; a plot with no data is not written.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::error::BenchError;
use crate::report::Report;
use crate::scenarios::Outcome;

type Series = Vec<(String, Vec<(f64, f64)>)>;

const SIZE: (u32, u32) = (900, 520);

fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
    ];
    C[i % C.len()]
}

fn bounds(series: &Series) -> Option<(f64, f64, f64, f64)> {
    let pts: Vec<&(f64, f64)> = series.iter().flat_map(|(_, p)| p).collect();
    if pts.is_empty() {
        return None;
    }
    let f = |g: fn(&(f64, f64)) -> f64, max: bool| {
        pts.iter()
            .map(|p| g(p))
            .fold(if max { f64::MIN } else { f64::MAX }, |a, b| {
                if max {
                    a.max(b)
                } else {
                    a.min(b)
                }
            })
    };
    Some((
        f(|p| p.0, false),
        f(|p| p.0, true),
        f(|p| p.1, false),
        f(|p| p.1, true),
    ))
}

macro_rules! draw {
    ($path:expr, $title:expr, $xd:expr, $yd:expr, $series:expr, $x:expr, $y:expr, $xfmt:expr) => {{
        let path: &Path = $path;
        let perr = |e: &dyn std::fmt::Display| BenchError::Plot {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let root = SVGBackend::new(path, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| perr(&e))?;
        let mut chart = ChartBuilder::on(&root)
            .caption($title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d($x, $y)
            .map_err(|e| perr(&e))?;
        chart
            .configure_mesh()
            .x_desc($xd)
            .y_desc($yd)
            .x_label_formatter($xfmt)
            .draw()
            .map_err(|e| perr(&e))?;
        for (i, (name, pts)) in $series.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(|e| perr(&e))?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(|e| perr(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| perr(&e))?;
        root.present().map_err(|e| perr(&e))?;
        Ok::<(), BenchError>(())
    }};
}

fn log_log(
    path: &Path,
    title: &str,
    xd: &str,
    yd: &str,
    series: &Series,
) -> Result<bool, BenchError> {
    let Some((x0, x1, y0, y1)) = bounds(series) else {
        return Ok(false);
    };
    let fmt = |v: &f64| format!("{v:.0}");
    draw!(
        path,
        title,
        xd,
        yd,
        series,
        (x0 * 0.8..x1 * 1.25).log_scale(),
        (y0.max(1.0) * 0.5..y1 * 2.0).log_scale(),
        &fmt
    )?;
    Ok(true)
}

fn lin_lin(
    path: &Path,
    title: &str,
    xd: &str,
    yd: &str,
    series: &Series,
) -> Result<bool, BenchError> {
    let Some((x0, x1, _, y1)) = bounds(series) else {
        return Ok(false);
    };
    let fmt = |v: &f64| format!("{v:.1}");
    draw!(
        path,
        title,
        xd,
        yd,
        series,
        x0..x1.max(x0 + 1e-9),
        0.0..y1 * 1.1 + 1e-9,
        &fmt
    )?;
    Ok(true)
}

/// Rows named `prefix<N>` as (N, throughput) per server.
fn by_size(results: &[Outcome], servers: &[String], prefix: &str) -> Series {
    servers
        .iter()
        .map(|s| {
            let mut pts: Vec<(f64, f64)> = results
                .iter()
                .filter(|o| &o.server == s)
                .filter_map(|o| {
                    Some((
                        o.name.strip_prefix(prefix)?.parse::<f64>().ok()?,
                        o.summary.throughput,
                    ))
                })
                .filter(|p| p.1 > 0.0)
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            (s.clone(), pts)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect()
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// Writes every plot the results allow into `dir`; the files written.
pub fn write_all(dir: &Path, report: &Report) -> Result<Vec<PathBuf>, BenchError> {
    std::fs::create_dir_all(dir)?;
    let servers: Vec<String> = report.servers.iter().map(|s| s.name.clone()).collect();
    let r = &report.results;
    let mut written = Vec::new();
    let p = dir.join("throughput_vs_batch_size.svg");
    if log_log(
        &p,
        "_bulk_docs: throughput vs batch size",
        "documents per _bulk_docs request",
        "docs/s",
        &by_size(r, &servers, "bulk_doc_"),
    )? {
        written.push(p);
    }
    let p = dir.join("throughput_vs_page_size.svg");
    if log_log(
        &p,
        "_all_docs?include_docs=true paging: throughput vs page size",
        "page size (limit)",
        "docs/s",
        &by_size(r, &servers, "all_docs_page_"),
    )? {
        written.push(p);
    }
    // The operator tools: the pipeline's and copy's throughput vs fixed page
    // size, with automatic `settee copy` as a horizontal reference line.
    let mut tools = Series::new();
    for (server, pts) in by_size(r, &servers, "copy_tools_copy_fixed_") {
        tools.push((format!("{server}: settee copy -u N -b N"), pts));
    }
    for (server, pts) in by_size(r, &servers, "copy_tools_pipeline_") {
        let span = (pts[0].0, pts[pts.len() - 1].0);
        tools.push((format!("{server}: ls-docs -u N | post-docs"), pts));
        if let Some(c) = r.iter().find(|o| {
            o.server == server && o.name == "copy_tools_copy" && o.summary.throughput > 0.0
        }) {
            let y = c.summary.throughput;
            tools.push((
                format!("{server}: settee copy (automatic sizes)"),
                vec![(span.0, y), (span.1, y)],
            ));
        }
    }
    let p = dir.join("copy_tools_vs_page_size.svg");
    if log_log(
        &p,
        "copying a database: settee copy (automatic, fixed -u N) vs ls-docs -u N | post-docs",
        "page size (-u N)",
        "docs/s",
        &tools,
    )? {
        written.push(p);
    }
    // Latency percentiles per server, over the rows in run order.
    let mut all_servers = servers.clone();
    for o in r {
        if !all_servers.contains(&o.server) {
            all_servers.push(o.server.clone());
        }
    }
    for s in &all_servers {
        let rows: Vec<&Outcome> = r
            .iter()
            .filter(|o| &o.server == s && o.summary.samples > 0)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let names: Vec<String> = rows.iter().map(|o| o.name.clone()).collect();
        let pick = |f: fn(&Outcome) -> f64| -> Vec<(f64, f64)> {
            rows.iter()
                .enumerate()
                .map(|(i, o)| (i as f64, f(o).max(0.001)))
                .collect()
        };
        let series: Series = vec![
            ("p50".into(), pick(|o| o.summary.median_ms)),
            ("p90".into(), pick(|o| o.summary.p90_ms)),
            ("p99".into(), pick(|o| o.summary.p99_ms)),
        ];
        let Some((_, _, y0, y1)) = bounds(&series) else {
            continue;
        };
        let p = dir.join(format!("latency_{}.svg", file_safe(s)));
        let fmt = move |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 0.01 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let n = rows.len() as f64;
        draw!(
            &p,
            &format!("latency percentiles per row: {s}"),
            "row (run order)",
            "ms (log)",
            series,
            -0.5..n - 0.5,
            (y0 * 0.5..y1 * 2.0).log_scale(),
            &fmt
        )?;
        written.push(p);
    }
    // Spike timeline.
    let timeline = |key: &str| -> Series {
        r.iter()
            .filter(|o| o.name == "spike_during")
            .filter_map(|o| {
                let t = o.extra.get("timeline")?.as_array()?;
                let pts = t
                    .iter()
                    .filter_map(|w| Some((w["t_s"].as_f64()?, w[key].as_f64()?)))
                    .collect();
                Some((o.server.clone(), pts))
            })
            .collect()
    };
    let p = dir.join("spike_p99_latency.svg");
    if lin_lin(
        &p,
        "spike 10 -> 1000 -> 10 connections: p99 latency",
        "seconds",
        "p99 ms",
        &timeline("p99_ms"),
    )? {
        written.push(p);
    }
    let p = dir.join("spike_throughput.svg");
    if lin_lin(
        &p,
        "spike 10 -> 1000 -> 10 connections: throughput",
        "seconds",
        "docs/s",
        &timeline("throughput"),
    )? {
        written.push(p);
    }
    Ok(written)
}
