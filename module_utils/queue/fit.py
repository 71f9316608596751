"""Gang fit: a placement fits only whole, its `nodes` bundles on distinct workers and its driver on any one worker
(beside a bundle or not), on the free resources given (a mapping worker id -> resources: the uncordoned workers only).
The choice is deterministic: the driver on its best-fit worker among those that leave room for the gang, then the gang
on the best-fit workers (each left with the fewest GPUs, then CPUs, then other resources, then by id), so fragments
stay small and two runs over the same data choose alike."""

_LISTED = 6  # workers named in words, at most
_SCARCE = ("GPU", "CPU")  # the resources best fit saves first, in this order


def holds(free, need):
    """Whether free resources hold what need asks (a loop: the decision's innermost step)."""
    for name, amount in need.items():
        if amount and free.get(name, 0) < amount:
            return False
    return True


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
    gpu, cpu = free.get("GPU", 0) - need.get("GPU", 0), free.get("CPU", 0) - need.get("CPU", 0)
    others = (sum(v for n, v in free.items() if n not in _SCARCE) - sum(v for n, v in need.items() if n not in _SCARCE))
    return gpu, cpu, others, worker


def _best(able, free, need, count):
    """The count workers of able that best fit need."""
    return sorted(able, key=lambda w: _left(free[w], need, w))[:count]


def fits(placement, free):
    """Whether the whole placement fits (place's answer without choosing where: no sorting)."""
    need, driver, nodes = placement.per_node, placement.driver, placement.nodes
    if not any(need.values()):
        return any(holds(res, driver) for res in free.values())
    able = [w for w, res in free.items() if holds(res, need)]
    if len(able) < nodes:
        return False
    if not any(driver.values()):
        return True
    spare = len(able) > nodes  # a worker the gang does not need may hold the driver whole
    return any(holds(res, driver) and (spare or w not in able or holds(minus(res, driver), need))
               for w, res in free.items())


def place(placement, free):
    """Where the whole placement goes ({worker: what it takes there}), or None when it does not fit."""
    need, driver, nodes = placement.per_node, placement.driver, placement.nodes
    if not any(need.values()):
        able = [w for w, res in free.items() if holds(res, driver)]
        return {_best(able, free, driver, 1)[0]: dict(driver)} if able else None
    able = [w for w, res in free.items() if holds(res, need)]
    if len(able) < nodes:
        return None
    if not any(driver.values()):
        return {w: dict(need) for w in _best(able, free, need, nodes)}
    # The gang is any `nodes` of the able workers, so the driver may go on worker d when d holds it and the able
    # workers, d counted only if it still holds a bundle beside the driver, are enough: the driver's best fit first.
    for d in _best([w for w, res in free.items() if holds(res, driver)], free, driver, len(free)):
        rest = minus(free[d], driver)
        still = [w for w in able if w != d or holds(rest, need)]
        if len(still) >= nodes:
            gang = {w: dict(need) for w in _best(still, {**free, d: rest}, need, nodes)}
            gang[d] = plus(gang.get(d, {}), driver)
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
