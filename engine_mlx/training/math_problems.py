"""Math word problems, generated: the offline corpora have prose and code but no math, and
the drafter is judged on math prompts too. Templates with random quantities; each problem
asks for a step-by-step solution, the style the target answers in."""

from __future__ import annotations

import random

_NAMES = ["Ava", "Ben", "Chloe", "Diego", "Emma", "Farid", "Grace", "Hiro", "Ines", "Jonas"]
_ITEMS = ["apples", "books", "marbles", "stickers", "pencils", "cookies", "coins", "shells"]

_TEMPLATES = [
    "{a} has {x} {item}. {b} gives {a} {y} more, then {a} gives away {z}. How many {item} "
    "does {a} have now?",
    "A box holds {x} {item}. How many {item} are in {y} boxes?",
    "{a} shares {p} {item} equally among {q} friends. How many does each friend get?",
    "A train travels at {x} km per hour for {y} hours. How far does it travel?",
    "{a} buys {x} notebooks at ${y} each and pays with a ${n} bill. How much change does {a} get?",
    "The price of a jacket is ${n}. It is reduced by {pct}%. What is the new price?",
    "A rectangle is {x} cm long and {y} cm wide. What are its area and its perimeter?",
    "{a} reads {x} pages a day. How many days does {a} need for a book of {p} pages?",
    "What is {x} times {y}, plus {z}?",
    "Solve for x: {x}x + {y} = {n}.",
    "{a} is {x} years old. {b} is {y} years older than {a}. How old will {b} be in {z} years?",
    "A tank holds {n} litres and fills at {x} litres per minute. How long until it is full?",
]


def math_problem(rng: random.Random) -> str:
    """One problem with its instruction, numbers chosen so the answers stay whole."""
    q = rng.randint(2, 9)
    x, y = rng.randint(2, 60), rng.randint(2, 30)
    values = {
        "a": rng.choice(_NAMES),
        "b": rng.choice(_NAMES),
        "item": rng.choice(_ITEMS),
        "x": x,
        "y": y,
        "z": rng.randint(1, x),
        "q": q,
        "p": q * rng.randint(3, 40),
        "n": x * y + rng.randint(1, 99),
        "pct": rng.choice([10, 15, 20, 25, 30, 40, 50]),
    }
    problem = rng.choice(_TEMPLATES).format(**values)
    ask = rng.choice(["Solve it step by step.", "Show your work.", "Explain each step."])
    return f"{problem} {ask}"
