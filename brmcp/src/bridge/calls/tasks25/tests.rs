//! The 2025-11-25 form of the journal's tasks: an agent's pages hold its tasks on
//! that bot only, each once, in order, whatever else the journal holds.

use std::collections::HashSet;
use std::sync::Arc;

use brmcp_adapters::SystemClock;

use super::super::Calls;
use super::super::journal::{NewCall, Recorded};
use super::{LIST_PAGE, Status25};

const BOT: &str = "0101010101010101010101010101010101010101010101010101010101010101";
const OTHER_BOT: &str = "0202020202020202020202020202020202020202020202020202020202020202";

fn record(calls: &Calls, agent: &str, bot: &str, key: &str) {
    let call = NewCall {
        agent,
        session: None,
        request: "1",
        key,
        own_key: false,
        bot,
        tool: "echo",
        args: [0; 32],
        params: r#"{"name":"echo","arguments":{}}"#,
        run: "run1",
    };
    match calls.journal.record(&call, calls.now()).expect("record") {
        Recorded::New(_) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_agents_pages_hold_its_tasks_on_that_bot_each_once_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = Calls::open(dir.path(), Arc::new(SystemClock)).expect("open");
    let mut mine = Vec::new();
    for i in 0..(2 * LIST_PAGE + 7) {
        let key = format!("key-a-{i:04}");
        record(&calls, "a", BOT, &key);
        mine.push(key);
        // Another agent's and another bot's calls in between.
        if i % 10 == 0 {
            record(&calls, "b", BOT, &format!("key-b-{i:04}"));
            record(&calls, "a", OTHER_BOT, &format!("key-o-{i:04}"));
        }
    }
    let mut seen = Vec::new();
    let mut after = 0;
    let mut pages = 0;
    loop {
        let page = calls.tasks25("a", BOT, after);
        pages += 1;
        assert!(page.tasks.len() <= LIST_PAGE);
        assert!(page.tasks.iter().all(|t| t.status == Status25::Working));
        seen.extend(page.tasks.into_iter().map(|t| t.task_id));
        match page.next {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen, mine);
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), seen.len());
    // Another agent's task is not found, nor one on another bot.
    assert!(calls.task25("a", BOT, "key-b-0000").is_none());
    assert!(calls.task25("a", BOT, "key-o-0000").is_none());
    assert!(calls.task25("b", BOT, "key-a-0000").is_none());
    assert!(calls.task25("a", BOT, "key-a-0000").is_some());
    // A cursor past the end is an empty last page.
    let past = calls.tasks25("a", BOT, i64::MAX);
    assert!(past.tasks.is_empty() && past.next.is_none());
}

#[test]
fn a_task_is_cancelled_once_and_another_agents_is_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = Calls::open(dir.path(), Arc::new(SystemClock)).expect("open");
    record(&calls, "a", BOT, "key-1");
    assert_eq!(
        calls.cancel_task25("b", BOT, "key-1"),
        Err(super::CancelError::NotFound)
    );
    let task = calls.cancel_task25("a", BOT, "key-1").expect("cancelled");
    assert_eq!(task.status, Status25::Cancelled);
    assert_eq!(
        calls.cancel_task25("a", BOT, "key-1"),
        Err(super::CancelError::Ended(Status25::Cancelled))
    );
    let (task, _) = calls.task25("a", BOT, "key-1").expect("kept");
    assert_eq!(task.status, Status25::Cancelled);
}
