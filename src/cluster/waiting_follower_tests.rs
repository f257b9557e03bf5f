//! A follower's blocked acquire against a leader played by the test: what
//! its client hears, and what the leader is told, for each way the wait
//! can end (the races of a grant with the client leaving, the leader
//! changing or the conversation being lost).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::core::Wake;
use super::leader_queue::{Blocker, Conversation, FromLeader};
use super::tests::{acquire, acquired};
use super::types::{Block, Blocked};
use super::waiting::QueueEvent;
use super::waiting_follower::{Turn, WaitOnLeader};
use crate::core::Refusal;
use crate::core::waiters::{Granted, Waiter};
use crate::registry::{Lease, Outcome, Registry};

/// The follower's task, and the test's ends of everything it talks to.
struct Wait {
    turn: Arc<Turn>,
    /// The client's end.
    client: oneshot::Receiver<Granted>,
    /// The leader's end of the conversation.
    leader: mpsc::UnboundedSender<FromLeader>,
    /// Sent (or dropped): the follower sees another leader.
    move_leader: Option<oneshot::Sender<()>>,
    /// What the task asks of its core (a grant to give back).
    wakes: mpsc::UnboundedReceiver<Wake>,
    task: JoinHandle<()>,
}

fn start(timeout: Option<Duration>) -> Wait {
    let (leader, conversation) = mpsc::unbounded_channel();
    let conversation: Arc<Mutex<Option<Conversation>>> = Arc::new(Mutex::new(Some(conversation)));
    let block: Blocker = Arc::new(move |_, _| {
        let conversation = conversation.lock().unwrap().take().expect("one block");
        Box::pin(async move { Ok(conversation) })
    });
    let (run, mut waiter, client) = Waiter::for_acquire(acquire("a", "w1", 30.0), 1);
    waiter.deadline = timeout.map(|timeout| tokio::time::Instant::now() + timeout);
    let request = Block {
        op: waiter.acquire(run),
        timeout_ms: timeout.map(|timeout| timeout.as_millis() as u64),
    };
    let (move_leader, moved) = oneshot::channel::<()>();
    let (wake, wakes) = mpsc::unbounded_channel();
    let turn = Arc::new(Turn::default());
    let task = WaitOnLeader {
        block,
        leader: 1,
        moved: Box::pin(async move {
            let _ = moved.await;
        }),
        waiter,
        request,
        turn: turn.clone(),
        patience: Duration::from_secs(3),
        wake,
    };
    Wait {
        turn,
        client,
        leader,
        move_leader: Some(move_leader),
        wakes,
        task: tokio::spawn(task.run()),
    }
}

impl Wait {
    /// The leader offers the run: whether the follower took it.
    async fn offer(&self) -> bool {
        let (take, taken) = oneshot::channel();
        if self.leader.send(FromLeader::Offer(take)).is_err() {
            return false;
        }
        taken.await.is_ok()
    }

    async fn heard(self) -> Granted {
        let heard = tokio::time::timeout(Duration::from_secs(10), self.client).await;
        heard.expect("an answer in time").expect("an answer")
    }
}

fn lease() -> Lease {
    let mut registry = Registry::new(10.0, 0);
    acquired(&registry.apply(&acquire("a", "w1", 30.0), 1000.0))
}

fn is_try_again(granted: &Granted) -> bool {
    matches!(granted, Granted::Refused(Refusal::TryAgain(_)))
}

fn is_uncertain(granted: &Granted) -> bool {
    matches!(granted, Granted::Refused(Refusal::Uncertain(_)))
}

#[tokio::test(start_paused = true)]
async fn a_grant_after_a_taken_offer_reaches_the_client() {
    let wait = start(None);
    assert!(wait.offer().await);
    let granted = Blocked::Outcome(Outcome::Acquired(Some(lease())));
    wait.leader.send(FromLeader::Answer(granted)).unwrap();
    let heard = wait.heard().await;
    assert!(
        matches!(&heard, Granted::Lease(l, None) if *l == lease()),
        "{heard:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_conversation_lost_before_a_take_is_try_again_and_after_one_uncertain() {
    let wait = start(None);
    drop(wait.leader);
    let heard = tokio::time::timeout(Duration::from_secs(10), wait.client).await;
    assert!(is_try_again(&heard.unwrap().unwrap()));

    let wait = start(None);
    assert!(wait.offer().await);
    let Wait { leader, client, .. } = wait;
    drop(leader);
    let heard = tokio::time::timeout(Duration::from_secs(10), client).await;
    let heard = heard.unwrap().unwrap();
    assert!(is_uncertain(&heard), "{heard:?}");
}

#[tokio::test(start_paused = true)]
async fn another_leader_before_a_take_is_try_again_and_after_one_waits_for_the_answer() {
    let mut wait = start(None);
    wait.move_leader.take().unwrap().send(()).unwrap();
    let heard = wait.heard().await;
    assert!(is_try_again(&heard), "{heard:?}");

    let mut wait = start(None);
    assert!(wait.offer().await);
    wait.move_leader.take().unwrap().send(()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The old leader's entry ended uncertain: that is what the client hears.
    let refused = Blocked::Refused(super::types::ClusterRefusal::Uncertain("discarded".into()));
    wait.leader.send(FromLeader::Answer(refused)).unwrap();
    let heard = wait.heard().await;
    assert!(is_uncertain(&heard), "{heard:?}");
}

#[tokio::test(start_paused = true)]
async fn no_answer_within_the_patience_after_a_take_is_uncertain() {
    let wait = start(None);
    assert!(wait.offer().await);
    let started = tokio::time::Instant::now();
    let Wait { leader, client, .. } = wait;
    let heard = tokio::time::timeout(Duration::from_secs(10), client).await;
    assert!(is_uncertain(&heard.unwrap().unwrap()));
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    drop(leader);
}

#[tokio::test(start_paused = true)]
async fn the_timeout_answers_null_and_leaves_the_queue() {
    let wait = start(Some(Duration::from_millis(500)));
    let started = tokio::time::Instant::now();
    let Wait { leader, client, .. } = wait;
    let heard = tokio::time::timeout(Duration::from_secs(10), client).await;
    assert!(matches!(heard.unwrap().unwrap(), Granted::TimedOut));
    assert_eq!(started.elapsed(), Duration::from_millis(500));
    // The conversation is dropped: the leader's queue lets it go.
    tokio::time::timeout(Duration::from_secs(1), leader.closed())
        .await
        .expect("the conversation ended");
}

#[tokio::test(start_paused = true)]
async fn a_client_gone_declines_its_offer_and_takes_nothing() {
    let wait = start(None);
    let Wait {
        leader,
        client,
        task,
        ..
    } = wait;
    drop(client);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let (take, taken) = oneshot::channel();
    // Sent, or the conversation is already closed: either way, no take.
    let _ = leader.send(FromLeader::Offer(take));
    assert!(taken.await.is_err(), "an offer taken for a client gone");
    task.await.unwrap();
    assert!(leader.is_closed());
}

#[tokio::test(start_paused = true)]
async fn a_grant_to_a_client_that_left_after_the_take_is_given_back() {
    let wait = start(None);
    assert!(wait.offer().await);
    let Wait {
        leader,
        client,
        mut wakes,
        task,
        ..
    } = wait;
    drop(client);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let granted = Blocked::Outcome(Outcome::Acquired(Some(lease())));
    leader.send(FromLeader::Answer(granted)).unwrap();
    task.await.unwrap();
    match wakes.recv().await {
        Some(Wake::Queue(QueueEvent::GiveBack(given))) => assert_eq!(given, lease()),
        _ => panic!("the grant was not given back"),
    }
}

#[tokio::test(start_paused = true)]
async fn client_unblock_answers_at_once_unless_an_offer_was_taken() {
    let wait = start(None);
    assert!(wait.turn.blocked());
    assert!(wait.turn.unblock(true));
    let leader = wait.leader.clone();
    assert!(matches!(wait.heard().await, Granted::Unblocked));
    tokio::time::timeout(Duration::from_secs(1), leader.closed())
        .await
        .expect("the conversation ended");

    let wait = start(None);
    assert!(wait.offer().await);
    assert!(!wait.turn.unblock(false), "the run is on its way");
    assert!(wait.turn.blocked());
    let granted = Blocked::Outcome(Outcome::Acquired(Some(lease())));
    wait.leader.send(FromLeader::Answer(granted)).unwrap();
    let turn = wait.turn.clone();
    assert!(matches!(wait.heard().await, Granted::Lease(..)));
    assert!(!turn.blocked());
}
