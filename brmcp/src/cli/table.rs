//! How the listing commands print: aligned tables for people, one JSON document for
//! scripts, times in RFC 3339 UTC, milliatom amounts in atoms.

use std::fmt;

use serde_json::Value;

/// Spaces between two columns.
const GAP: usize = 2;

/// A table of text cells under a header, printed with its columns aligned.
pub(crate) struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column names.
    pub(crate) fn new(header: &[&'static str]) -> Self {
        Self {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (one cell per column).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len(), "one cell per column");
        self.rows.push(cells);
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let header = self.header.iter().map(|h| (*h).to_owned()).collect();
        for cells in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
                if i + 1 == cells.len() {
                    line.push_str(cell);
                } else {
                    let pad = width - cell.chars().count() + GAP;
                    line.push_str(cell);
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            writeln!(f, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// Prints `value` as one pretty JSON document on stdout.
pub(crate) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("a JSON value always serializes")
    );
}

pub(crate) use crate::rfc3339::rfc3339;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_under_the_header() {
        let mut table = Table::new(&["ID", "TOOL", "NOTE"]);
        table.row(vec!["7".into(), "fortune".into(), String::new()]);
        table.row(vec!["12".into(), "echo".into(), "late".into()]);
        assert_eq!(
            table.to_string(),
            "ID  TOOL     NOTE\n7   fortune\n12  echo     late\n"
        );
    }
}
