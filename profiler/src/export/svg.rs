//! Flamegraph SVGs drawn by inferno.

use std::io::Cursor;

use inferno::{
    differential,
    flamegraph::{
        self,
        color::{MultiPalette, Palette},
    },
};

use super::{ExportError, Metric};
use crate::model::placeholders::KERNEL_MARKER;

/// SVG options.
#[derive(Clone, Debug, Default)]
pub struct SvgOptions {
    /// Weight, for the title and units.
    pub metric: Metric,
    /// Subtitle (e.g. the recording's host and duration).
    pub subtitle: Option<String>,
    /// Stable output for tests (no JavaScript, pretty XML, fixed colours).
    pub deterministic: bool,
}

fn options(o: &SvgOptions, title: String) -> flamegraph::Options<'static> {
    let mut opt = flamegraph::Options::default();
    opt.title = title;
    opt.subtitle = o.subtitle.clone();
    opt.count_name = o.metric.unit().to_string();
    opt.name_type = "Frame:".to_string();
    opt.hash = true;
    opt.deterministic = o.deterministic;
    opt.pretty_xml = o.deterministic;
    opt.no_javascript = o.deterministic;
    opt
}

/// With user stacks (`[kernel]` frames), the kernel's frames annotated
/// `_[k]` (inferno draws them orange and shows them without the suffix),
/// so the application's frames stand apart as in perf's call-graph
/// flamegraphs; None when no line has user frames.
fn annotate_kernel_frames(lines: &[String]) -> Option<Vec<String>> {
    let marker = format!(";{KERNEL_MARKER};");
    if !lines.iter().any(|l| l.contains(&marker)) {
        return None;
    }
    let annotate = |line: &String| {
        let Some((stack, weight)) = line.rsplit_once(' ') else {
            return line.clone();
        };
        let frames: Vec<&str> = stack.split(';').collect();
        let first_kernel = frames.iter().position(|f| *f == KERNEL_MARKER).map_or(0, |m| m + 1);
        let out: Vec<String> = frames
            .iter()
            .enumerate()
            .map(|(i, f)| if i >= first_kernel { format!("{f}_[k]") } else { f.to_string() })
            .collect();
        format!("{} {weight}", out.join(";"))
    };
    Some(lines.iter().map(annotate).collect())
}

/// Draws folded `lines`; an empty profile gets a graph that says so.
pub fn svg(lines: &[String], o: &SvgOptions) -> Result<Vec<u8>, ExportError> {
    let mut out = Vec::new();
    let empty = ["[no lock contention recorded] 1".to_string()];
    let (lines, title) = if lines.is_empty() {
        (&empty[..], format!("{} - empty recording", o.metric.title()))
    } else {
        (lines, o.metric.title().to_string())
    };
    let mut opt = options(o, title);
    let annotated = annotate_kernel_frames(lines);
    if annotated.is_some() {
        // Kernel frames (annotated) orange; user frames red, or yellow for C++ and Rust.
        opt.colors = Palette::Multi(MultiPalette::Perl);
    }
    let lines = annotated.as_deref().unwrap_or(lines);
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut out)?;
    Ok(out)
}

/// Differential flamegraph of two folded profiles: widths from `after`,
/// colour by change (red grew, blue shrank).
pub fn diff_svg(before: &[String], after: &[String], o: &SvgOptions) -> Result<(Vec<u8>, Vec<String>), ExportError> {
    let mut folded = Vec::new();
    differential::from_readers(
        differential::Options::default(),
        Cursor::new(before.join("\n")),
        Cursor::new(after.join("\n")),
        &mut folded,
    )?;
    let text = String::from_utf8_lossy(&folded).into_owned();
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut out = Vec::new();
    let title = format!("{} - differential (red: more after, blue: less)", o.metric.title());
    let mut opt = options(o, title);
    if lines.is_empty() {
        flamegraph::from_lines(&mut opt, ["[no lock contention recorded] 1 1"], &mut out)?;
    } else {
        flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut out)?;
    }
    Ok((out, lines))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        export::{FoldOptions, folded_lines},
        report::fixture,
    };

    fn parse(svg: &[u8]) -> String {
        let text = String::from_utf8(svg.to_vec()).expect("utf8");
        let opts = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
        roxmltree::Document::parse_with_options(&text, opts).expect("well-formed XML");
        text
    }

    #[test]
    fn svg_is_well_formed_and_holds_frames_and_weights() {
        let lines = folded_lines(&fixture::profile(), &FoldOptions::default()).expect("fold");
        let o = SvgOptions { deterministic: true, ..Default::default() };
        let text = parse(&svg(&lines, &o).expect("svg"));
        assert!(text.contains("Lock wait time (ns)"));
        assert!(text.contains("copy_process"));
        assert!(text.contains("tasklist_lock [rwlock:W]"));
        assert!(text.contains("anon_pipe_write"));
        assert!(text.contains("96,000 ns"), "weights are shown with their unit");
    }

    #[test]
    fn differential_has_both_signs() {
        let before = vec!["a;b;lock [mutex] 100".to_string(), "a;c;lock [mutex] 50".to_string()];
        let after = vec!["a;b;lock [mutex] 300".to_string(), "a;c;lock [mutex] 10".to_string()];
        let (svg_bytes, lines) =
            diff_svg(&before, &after, &SvgOptions { deterministic: true, ..Default::default() }).expect("diff");
        assert!(lines.contains(&"a;b;lock [mutex] 100 300".to_string()), "{lines:?}");
        assert!(lines.contains(&"a;c;lock [mutex] 50 10".to_string()), "{lines:?}");
        let text = parse(&svg_bytes);
        // Frame titles carry the change in share of the total: + for growth, - for shrink.
        assert!(text.contains("lock [mutex] (300 ns, 96.77%; +64.52%)"), "growth shown: {text}");
        assert!(text.contains("lock [mutex] (10 ns, 3.23%; -12.90%)"), "shrink shown");
        assert!(text.contains("fill=\"rgb(255,100,100)\""), "growth is red");
        assert!(text.contains("fill=\"rgb(220,220,255)\""), "shrink is blue");
    }

    #[test]
    fn empty_recording_gives_a_valid_svg_that_says_so() {
        let text = parse(&svg(&[], &SvgOptions { deterministic: true, ..Default::default() }).expect("svg"));
        assert!(text.contains("empty recording"));
        assert!(text.contains("no lock contention recorded"));
    }

    #[test]
    fn user_frames_are_coloured_apart_from_the_kernel_frames() {
        let lines = vec![
            "main;lockprof_test_writer;[kernel];entry_SYSCALL_64;anon_pipe_write;mutex [mutex] 30".to_string(),
            "entry_SYSCALL_64;do_exit;tasklist_lock [rwlock:W] 10".to_string(),
        ];
        let annotated = annotate_kernel_frames(&lines).expect("user frames present");
        assert_eq!(
            annotated[0],
            "main;lockprof_test_writer;[kernel];entry_SYSCALL_64_[k];anon_pipe_write_[k];mutex [mutex]_[k] 30"
        );
        assert!(annotated[1].split(';').all(|f| f.contains("_[k]")), "{}", annotated[1]);
        assert!(annotate_kernel_frames(&lines[1..]).is_none(), "kernel-only graphs keep their palette");
        let text = parse(&svg(&lines, &SvgOptions { deterministic: true, ..Default::default() }).expect("svg"));
        assert!(text.contains("lockprof_test_writer") && text.contains("anon_pipe_write"), "{text}");
        assert!(!text.contains("_[k]"), "annotations are not shown");
        let colour = |name: &str| {
            let at = text.find(&format!("<title>{name} (")).expect("frame drawn");
            let fill = text[at..].find("fill=\"").map(|i| at + i + 6).expect("fill");
            text[fill..fill + 18].to_string()
        };
        assert_ne!(colour("lockprof_test_writer"), colour("anon_pipe_write"));
    }
}
