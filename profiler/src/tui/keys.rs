//! The key table: one definition drives key handling, the help overlay and
//! the footer.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// Everything a key can ask for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Leave.
    Quit,
    /// Selection up.
    Up,
    /// Selection down.
    Down,
    /// Selection to the first row.
    First,
    /// Selection to the last row.
    Last,
    /// Show or hide the selected lock's detail (callers, stacks, history, histogram).
    Expand,
    /// Next sort column.
    CycleSort,
    /// Start typing a name/caller filter.
    Filter,
    /// Next lock-type filter.
    CycleType,
    /// Freeze or resume the display.
    Pause,
    /// Forget all statistics.
    Reset,
    /// Save the current data as a recording file.
    Export,
    /// Open the latest incident (a `--trigger` fired), or back to live.
    Incident,
    /// Show or hide the help overlay.
    Help,
    /// Next view (locks, callers, tasks).
    NextView,
    /// Previous view.
    PrevView,
}

/// One row of the key table.
pub struct Binding {
    /// Keys as shown in the help.
    pub keys: &'static str,
    /// What it does.
    pub help: &'static str,
    /// The action.
    pub action: Action,
    /// Its entry in the footer, if it has one.
    pub hint: Option<Hint>,
    matches: fn(&KeyEvent) -> bool,
}

/// A binding as the footer shows it: a short key and one word.
pub struct Hint {
    /// The key (or keys) in short.
    pub keys: &'static str,
    /// What it does, in a word.
    pub word: &'static str,
}

const fn hint(keys: &'static str, word: &'static str) -> Option<Hint> {
    Some(Hint { keys, word })
}

/// The actions the footer names, in its order (the most needed first).
pub const FOOTER: [Action; 11] = [
    Action::Quit,
    Action::Help,
    Action::Down,
    Action::Expand,
    Action::CycleSort,
    Action::Filter,
    Action::CycleType,
    Action::Pause,
    Action::Reset,
    Action::Export,
    Action::NextView,
];

/// The footer line: the hints of [`FOOTER`], as the key table spells them.
pub fn footer() -> String {
    let hints = FOOTER.iter().filter_map(|a| BINDINGS.iter().find(|b| b.action == *a)?.hint.as_ref());
    hints.map(|h| format!("{} {}", h.keys, h.word)).collect::<Vec<_>>().join("  ")
}

fn ch(e: &KeyEvent, c: char) -> bool {
    e.code == KeyCode::Char(c) && !e.modifiers.contains(KeyModifiers::CONTROL)
}

/// The key table.
pub const BINDINGS: &[Binding] = &[
    Binding {
        keys: "j / Down",
        help: "move down",
        action: Action::Down,
        hint: hint("j/k", "move"),
        matches: |e| ch(e, 'j') || e.code == KeyCode::Down,
    },
    Binding {
        keys: "k / Up",
        help: "move up",
        action: Action::Up,
        hint: None,
        matches: |e| ch(e, 'k') || e.code == KeyCode::Up,
    },
    Binding {
        keys: "g / Home",
        help: "first row",
        action: Action::First,
        hint: None,
        matches: |e| ch(e, 'g') || e.code == KeyCode::Home,
    },
    Binding {
        keys: "G / End",
        help: "last row",
        action: Action::Last,
        hint: None,
        matches: |e| ch(e, 'G') || e.code == KeyCode::End,
    },
    Binding {
        keys: "Enter",
        help: "expand: callers, stacks, history, histogram",
        action: Action::Expand,
        hint: hint("Enter", "expand"),
        matches: |e| e.code == KeyCode::Enter,
    },
    Binding {
        keys: "s",
        help: "cycle the sort column",
        action: Action::CycleSort,
        hint: hint("s", "sort"),
        matches: |e| ch(e, 's'),
    },
    Binding {
        keys: "/",
        help: "filter by name or caller (Enter keeps, Esc clears)",
        action: Action::Filter,
        hint: hint("/", "filter"),
        matches: |e| ch(e, '/'),
    },
    Binding {
        keys: "t",
        help: "cycle the lock-type filter",
        action: Action::CycleType,
        hint: hint("t", "type"),
        matches: |e| ch(e, 't'),
    },
    Binding {
        keys: "p",
        help: "pause / resume",
        action: Action::Pause,
        hint: hint("p", "pause"),
        matches: |e| ch(e, 'p'),
    },
    Binding {
        keys: "r",
        help: "reset statistics",
        action: Action::Reset,
        hint: hint("r", "reset"),
        matches: |e| ch(e, 'r'),
    },
    Binding {
        keys: "e",
        help: "export a recording (for report/flamegraph)",
        action: Action::Export,
        hint: hint("e", "export"),
        matches: |e| ch(e, 'e'),
    },
    Binding {
        keys: "i",
        help: "open the latest incident (--trigger) / back to live",
        action: Action::Incident,
        hint: None,
        matches: |e| ch(e, 'i'),
    },
    Binding {
        keys: "Tab / Shift-Tab",
        help: "next / previous view: locks, callers, tasks",
        action: Action::NextView,
        hint: hint("Tab", "view"),
        matches: |e| e.code == KeyCode::Tab,
    },
    Binding { keys: "", help: "", action: Action::PrevView, hint: None, matches: |e| e.code == KeyCode::BackTab },
    Binding { keys: "?", help: "this help", action: Action::Help, hint: hint("?", "help"), matches: |e| ch(e, '?') },
    Binding {
        keys: "q / Esc / Ctrl-C",
        help: "quit",
        action: Action::Quit,
        hint: hint("q", "quit"),
        matches: |e| {
            ch(e, 'q')
                || e.code == KeyCode::Esc
                || (e.code == KeyCode::Char('c') && e.modifiers.contains(KeyModifiers::CONTROL))
        },
    },
];

/// The action bound to a key, if any.
pub fn action_for(e: &KeyEvent) -> Option<Action> {
    BINDINGS.iter().find(|b| (b.matches)(e)).map(|b| b.action)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_map_to_actions() {
        assert_eq!(action_for(&key(KeyCode::Char('j'))), Some(Action::Down));
        assert_eq!(action_for(&key(KeyCode::Up)), Some(Action::Up));
        assert_eq!(action_for(&key(KeyCode::Esc)), Some(Action::Quit));
        assert_eq!(action_for(&KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), Some(Action::Quit));
        assert_eq!(action_for(&key(KeyCode::Char('c'))), None);
        assert_eq!(action_for(&key(KeyCode::BackTab)), Some(Action::PrevView));
    }

    #[test]
    fn the_footer_names_its_actions_from_the_table() {
        assert_eq!(
            footer(),
            "q quit  ? help  j/k move  Enter expand  s sort  / filter  t type  p pause  r reset  e export  Tab view"
        );
        // Every hint is shown, and every footer action has one.
        let hinted: Vec<Action> = BINDINGS.iter().filter(|b| b.hint.is_some()).map(|b| b.action).collect();
        assert_eq!(hinted.len(), FOOTER.len());
        assert!(FOOTER.iter().all(|a| hinted.contains(a)));
    }

    #[test]
    fn every_shown_binding_has_help() {
        for b in BINDINGS.iter().filter(|b| !b.keys.is_empty()) {
            assert!(!b.help.is_empty(), "{}", b.keys);
        }
    }
}
