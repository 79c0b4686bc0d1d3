"""Application lifecycle: add, remove, state changes and what they trigger, timers firing.

State changes go through the application's machine (`engine.app_state`, transitions as data);
`set_state` is the one place that records a change: the APP / SET row (APP / REMOVE for
Rejected), the state log, the shim's `updated` entry, and the timers a state starts (Starting,
Completing, and the retention of a terminated application). `fire_timers` runs what is due.

The lifecycle sits above asks and allocations: it removes them (an application that ends or
times out), and they never call back. What an ask or an allocation does to its application's
state is decided here, after the fact: `asked` (a new ask), `allocated` (an allocation
booked), `check_done` (an ask or allocation gone: is the application done?).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.app_state import STATE_DETAIL, TERMINAL_STATES, AppEvent, AppState, InvalidTransition
from engine.objects import Application
from engine.partition import allocations, asks, queues
from engine.partition.eventcodes import ADD, APP, QUEUE, REMOVE, SET
from engine.partition.timers import TimerKind
from engine.placement import DEFAULT_QUEUE
from engine.ugm import UserGroup
from engine.ugm.security import resolve
from shm.events import EventChangeDetail as Detail

if TYPE_CHECKING:
    from engine.partition.state import PartitionState
    from engine.objects import Ask
    from si.messages import AddApplication


_COUNTED_TERMINAL = frozenset({AppState.COMPLETED, AppState.FAILED, AppState.REJECTED})
"""YuniKorn's queue_app_total states."""


def set_state(part: PartitionState, app: Application, event: AppEvent, message: str = "") -> bool:
    """Fire an event on the app's machine; emit APP/SET (REMOVE for Rejected). False if the
    transition is illegal from the current state (nothing changes)."""
    old = app.fsm.state
    try:
        new = app.fsm.fire(event)
    except InvalidTransition:
        return False
    if new is old:
        return True
    now = part.wall_clock()
    app.state_log.append({"time": now, "applicationState": new.value})
    app.ver += 1
    if new is AppState.REJECTED:
        part.emit(APP, REMOVE, int(Detail.APP_REJECT), app.app_id, "", message)
    else:
        part.emit(APP, SET, int(STATE_DETAIL[new]), app.app_id, "", message)
    part.out.app_update(app.rm_id, app.app_id, new.value, message)
    if new is AppState.STARTING:
        app.start_time = now
        part.timers.set(part.timing.starting_ns, TimerKind.STARTING, app.app_id)
    elif new is AppState.COMPLETING:
        part.timers.set(part.timing.completing_ns, TimerKind.COMPLETING, app.app_id)
    elif new in TERMINAL_STATES:
        terminate(part, app)
    if new in _COUNTED_TERMINAL:
        part.metrics.terminal(app.queue.path if app.queue else app.queue_name, new.value.lower())
    part.version += 1
    return True


def add(part: PartitionState, rm_id: str, request: AddApplication) -> str | None:
    """Add an application; None if accepted, else the rejection reason (app is Rejected)."""
    app_id = request.application_id
    if app_id in part.apps:
        return f"application {app_id} already exists"
    part.terminated.pop(app_id, None)
    ugi = request.ugi
    user, groups = (ugi.user if ugi and ugi.user else "nobody"), (ugi.groups if ugi else ())
    user_group = resolve(user, groups)
    app = Application(app_id, part.name, request.queue_name,
                      user_group if isinstance(user_group, UserGroup) else UserGroup(user, groups),
                      dict(request.tags or {}), rm_id, request.placeholder_ask or {},
                      request.gang_scheduling_style or "Soft", request.execution_timeout_ms,
                      submit_time=part.wall_clock())
    part.emit(APP, ADD, int(Detail.DETAILS_NONE), app_id, "", app.queue_name)
    part.emit(APP, SET, int(Detail.APP_NEW), app_id, "", "")
    part.metrics.submitted("new")
    queue, reason = ((None, user_group) if isinstance(user_group, str)
                     else queues.place_app(part, app))
    part.metrics.submitted("accepted" if queue is not None else "rejected")
    if queue is None:
        app.rejected_message = reason
        part.terminated[app_id] = app
        set_state(part, app, AppEvent.REJECT, reason)
        return reason
    app.queue = queue
    queue.apps[app_id] = app
    part.apps[app_id] = app
    part.emit(QUEUE, ADD, int(Detail.QUEUE_APP), queue.path, app_id, "")
    part.version += 1
    return None


def remove(part: PartitionState, app_id: str, message: str = "removed by the RM") -> bool:
    """The RM removed the application: cancel asks, drop allocations, reach a final state."""
    app = part.apps.get(app_id)
    if app is None:
        if part.terminated.pop(app_id, None) is not None:
            part.emit(APP, REMOVE, int(Detail.DETAILS_NONE), app_id, "", message)
            part.version += 1
            return True
        return False
    for ask in list(app.asks.values()):
        asks.remove(part, app, ask, int(Detail.REQUEST_CANCEL))
    allocs = list(app.allocations.values())
    for alloc in allocs:
        allocations.remove(part, app, alloc, int(Detail.ALLOC_CANCEL))
    if allocs:
        check_done(part, app)
    state = app.fsm.state
    if state not in TERMINAL_STATES:
        if app.fsm.can_fire(AppEvent.COMPLETE):
            set_state(part, app, AppEvent.COMPLETE, message)
            set_state(part, app, AppEvent.COMPLETE, message)
        else:
            set_state(part, app, AppEvent.FAIL, message)
            set_state(part, app, AppEvent.FAIL, message)
    if app.app_id in part.apps:  # could not reach a terminal state: detach anyway
        terminate(part, app)
    part.terminated.pop(app_id, None)
    part.emit(APP, REMOVE, int(Detail.DETAILS_NONE), app_id, "", message)
    part.version += 1
    return True


def terminate(part: PartitionState, app: Application) -> None:
    """Final state reached: leave the queue, keep the app for readers until it expires."""
    app.finished_time = part.wall_clock()
    q = app.queue
    if app.app_id in part.apps:
        del part.apps[app.app_id]
        for ask in list(app.asks.values()):
            asks.remove(part, app, ask, int(Detail.REQUEST_CANCEL))
        if q is not None and q.apps.pop(app.app_id, None) is not None:
            part.emit(QUEUE, REMOVE, int(Detail.QUEUE_APP), q.path, app.app_id, "")
            queues.maybe_remove(part, q)
    if app.fsm.state is not AppState.EXPIRED:
        part.terminated[app.app_id] = app
        part.timers.set(part.timing.retention_ns, TimerKind.EXPIRE, app.app_id)
        _expire_over_limit(part)


def _expire_over_limit(part: PartitionState) -> None:
    """More finished apps than `maxRetainedApplications`: the oldest expire first (APP_EXPIRED),
    so the snapshot readers are served from stays within the size it was made for."""
    limit = part.timing.max_retained
    while len(part.terminated) > limit:
        oldest = next(iter(part.terminated))
        _expire(part, oldest, f"more than {limit} finished applications retained")
        part.terminated.pop(oldest, None)


def asked(part: PartitionState, app: Application, ask: Ask) -> None:
    """A new pending ask (`asks.add`): a placeholder counts and starts its gang's timer; the
    first request accepts a New application, a new one revives a Completing one."""
    if ask.placeholder:
        app.count_placeholder(ask.task_group, ask.resource)
        start_placeholder_timer(part, app)
    if app.fsm.state is AppState.NEW:
        set_state(part, app, AppEvent.RUN, f"first request {ask.key}")
        if part.sink.requests_enabled:
            part.sink.request(ask.key, app.app_id, added_message(app))
    elif app.fsm.state is AppState.COMPLETING:
        set_state(part, app, AppEvent.RUN, f"new request {ask.key}")


def added_message(app: Application) -> str:
    """The first request's event (the shim shows it on the pod). An application that asked for a
    queue it did not get, and landed in root.default by YuniKorn's fallback (a misspelled or
    missing queue), says so: YuniKorn places it there silently, which hides the typo."""
    message = f"Application {app.app_id} added to queue {app.queue.path}"
    asked_for = (app.queue_name or "").strip()
    if app.queue.path == DEFAULT_QUEUE and asked_for and asked_for.lower() not in (DEFAULT_QUEUE, "default"):
        message += (f", not the queue {asked_for!r} it asked for (no such leaf queue it may use: "
                    f"placement fell back to {DEFAULT_QUEUE})")
    return message


def allocated(part: PartitionState, app: Application, key: str) -> None:
    """The state changes an allocation booked (`allocations.book`) causes: New/Accepted ->
    Starting -> Running."""
    state = app.fsm.state
    if state is AppState.NEW:
        set_state(part, app, AppEvent.RUN, "recovered allocation")
        state = app.fsm.state
    if state is AppState.ACCEPTED:
        set_state(part, app, AppEvent.RUN, f"first allocation {key}")
        if not app.asks:
            set_state(part, app, AppEvent.RUN, "all requests allocated")
    elif state is AppState.STARTING or state is AppState.COMPLETING:
        set_state(part, app, AppEvent.RUN, f"allocation {key}")


def check_done(part: PartitionState, app: Application) -> None:
    """Nothing allocated any more: a Failing app fails, one without asks completes."""
    if app.allocations:
        return
    state = app.fsm.state
    if state is AppState.FAILING:
        set_state(part, app, AppEvent.FAIL, "all allocations released")
    elif not app.asks and state in (AppState.ACCEPTED, AppState.STARTING, AppState.RUNNING):
        set_state(part, app, AppEvent.COMPLETE, "no allocations or requests left")


# --- timers ------------------------------------------------------------------------------------

def fire_timers(part: PartitionState) -> None:
    """Run every timer that is due (placeholder, starting, completing, expiry)."""
    for kind, app_id in part.timers.due():
        if kind is TimerKind.EXPIRE:
            _expire(part, app_id)
            continue
        app = part.apps.get(app_id)
        if app is None:
            continue
        if kind is TimerKind.STARTING and app.fsm.state is AppState.STARTING:
            set_state(part, app, AppEvent.RUN, "starting timeout")
        elif kind is TimerKind.COMPLETING and app.fsm.state is AppState.COMPLETING:
            set_state(part, app, AppEvent.COMPLETE, "completing timeout")
        elif kind is TimerKind.PLACEHOLDER:
            _placeholder_timeout(part, app)


def _expire(part: PartitionState, app_id: str, reason: str = "retention time passed") -> None:
    app = part.terminated.get(app_id)
    if app is not None and app.fsm.state in TERMINAL_STATES \
            and app.finished_time and app.fsm.state is not AppState.EXPIRED:
        if app.fsm.can_fire(AppEvent.EXPIRE):
            set_state(part, app, AppEvent.EXPIRE, reason)
        part.terminated.pop(app_id, None)


def start_placeholder_timer(part: PartitionState, app: Application) -> None:
    """The first placeholder ask of an application starts its gang's timeout (once)."""
    if not app.ph_timer_started:
        app.ph_timer_started = True
        timeout = (app.ph_timeout_ms * 1_000_000 if app.ph_timeout_ms
                   else part.timing.placeholder_default_ns)
        part.timers.set(timeout, TimerKind.PLACEHOLDER, app.app_id)


def _placeholder_timeout(part: PartitionState, app: Application) -> None:
    """Gang placeholders not replaced in time: released; the app resumes (Soft) or fails
    (Hard, when no real allocation was made yet)."""
    ph_allocs = [a for a in app.allocations.values() if a.placeholder]
    ph_asks = [a for a in app.asks.values() if a.placeholder]
    if not ph_allocs and not ph_asks:
        return
    gang_started = any(not a.placeholder for a in app.allocations.values())
    msg = "placeholder timeout"
    if not gang_started:
        if app.gang_style == "Hard":
            set_state(part, app, AppEvent.FAIL, f"{msg} (gang style Hard)")
            for ask in list(app.asks.values()):
                if not ask.placeholder:
                    asks.remove(part, app, ask, int(Detail.REQUEST_CANCEL), msg)
                    part.out.ask_released(app.rm_id, app.app_id, ask.key, "application failed")
        else:
            set_state(part, app, AppEvent.RESUME, f"{msg} (gang style Soft)")
    for ask in ph_asks:
        asks.remove(part, app, ask, int(Detail.REQUEST_TIMEOUT), msg)
        part.out.ask_released(app.rm_id, app.app_id, ask.key, msg)
        app.count_timedout(ask.task_group)
    for alloc in ph_allocs:
        app.count_timedout(alloc.task_group)
        allocations.remove(part, app, alloc, int(Detail.ALLOC_TIMEOUT), termination="TIMEOUT",
                           message=msg)
    if ph_allocs:
        check_done(part, app)
    if app.fsm.state is AppState.RESUMING:
        set_state(part, app, AppEvent.RUN, "placeholders released")
        check_done(part, app)
    elif app.fsm.state is AppState.FAILING:
        check_done(part, app)
