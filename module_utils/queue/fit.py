"""Gang fit: a placement fits only whole, its `nodes` bundles on distinct workers and its driver on any one worker
(beside a bundle or not), on the free resources given (a mapping worker id -> resources: the uncordoned workers only).
The choice is deterministic: best fit (the workers left with the fewest GPUs, then CPUs, then other resources, then by
id), so fragments stay small and two runs over the same data choose alike."""

_LISTED = 6  # workers named in words, at most


def holds(free, need):
    """Whether free resources hold what need asks."""
    return all(free.get(name, 0) >= amount for name, amount in need.items() if amount)


def minus(free, need):
    out = dict(free)
    for name, amount in need.items():
        if amount:
            out[name] = out.get(name, 0) - amount
    return out


def plus(free, held):
    out = dict(free)
    for name, amount in held.items():
        out[name] = out.get(name, 0) + amount
    return out


def _left(free, need, worker):
    """The best-fit key of putting need on a worker: what it would have left, the scarcest resource first."""
    rest = minus(free, need)
    others = sum(amount for name, amount in rest.items() if name not in ("GPU", "CPU"))
    return rest.get("GPU", 0), rest.get("CPU", 0), others, worker


def _gang(placement, free):
    """{worker: resources} of the gang's bundles on distinct workers, or None."""
    need = placement.per_node
    able = [w for w, res in free.items() if holds(res, need)]
    if len(able) < placement.nodes:
        return None
    chosen = sorted(able, key=lambda w: _left(free[w], need, w))[:placement.nodes]
    return {w: dict(need) for w in chosen}


def _driver_on(free, driver):
    able = [w for w, res in free.items() if holds(res, driver)]
    return min(able, key=lambda w: _left(free[w], driver, w)) if able else None


def place(placement, free):
    """Where the whole placement goes ({worker: what it takes there}), or None when it does not fit."""
    if not any(placement.per_node.values()):
        where = _driver_on(free, placement.driver)
        return None if where is None else {where: dict(placement.driver)}
    gang = _gang(placement, free)
    if gang is None or not any(placement.driver.values()):
        return gang
    rest = {w: minus(res, gang[w]) if w in gang else res for w, res in free.items()}
    where = _driver_on(rest, placement.driver)
    if where is not None:
        gang[where] = plus(gang.get(where, {}), placement.driver)
        return gang
    # The best-fit gang took what the driver needed: the driver first, on each worker that holds it, in turn.
    for where in sorted(w for w, res in free.items() if holds(res, placement.driver)):
        gang = _gang(placement, {**free, where: minus(free[where], placement.driver)})
        if gang is not None:
            gang[where] = plus(gang.get(where, {}), placement.driver)
            return gang
    return None


def take(free, where):
    """free less what a placement takes (place's result), as a new mapping."""
    return {w: minus(res, where[w]) if w in where else res for w, res in free.items()}


def amount(value):
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def resources_words(need):
    """'1 GPU, 8 CPU, 1 worker_node': GPUs, then CPUs, then the others by name; 'nothing' when empty."""
    names = sorted((n for n, v in need.items() if v), key=lambda n: ({"GPU": 0, "CPU": 1}.get(n, 2), n))
    return ", ".join(f"{amount(need[n])} {n}" for n in names) or "nothing"


def needs_words(placement):
    """'2 nodes of 1 GPU', with ' and a driver of 1 worker_node' when it has one."""
    words = []
    if any(placement.per_node.values()):
        nodes = placement.nodes
        words.append(f"{nodes} node{'s' if nodes != 1 else ''} of {resources_words(placement.per_node)}")
    if any(placement.driver.values()):
        words.append(f"a driver of {resources_words(placement.driver)}")
    return " and ".join(words)


def listed(names):
    names = sorted(names)
    text = ", ".join(names[:_LISTED])
    return text + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def fit_words(placement, free):
    """Why it does not fit, in words: '1 fits on 198.18.0.11', 'none fits'."""
    need = placement.per_node if any(placement.per_node.values()) else placement.driver
    able = [w for w, res in free.items() if holds(res, need)]
    if not able:
        return "none fits" if free else "no uncordoned worker"
    if any(placement.per_node.values()) and len(able) >= placement.nodes:
        return f"{placement.nodes} fit, but not the driver beside them"
    return f"{len(able)} fit{'s' if len(able) == 1 else ''} on {listed(able)}"
