"""Chat questions, generated: the offline corpora hold documents, not conversations, yet the
app's users mostly ask short questions ("explain X with a short example"). Templates over
programming and general topics give the drafter that register, the one the target answers
in at length; the benchmark's chat prompts are never among them (another seed, and the
demo question's topic is left out)."""

from __future__ import annotations

import random

_CONCEPTS = [
    "recursion",
    "a hash table",
    "binary search",
    "garbage collection",
    "a closure",
    "a race condition",
    "memoization",
    "a linked list",
    "Big-O notation",
    "a REST API",
    "a mutex",
    "dependency injection",
    "a generator in Python",
    "a decorator in Python",
    "list comprehensions",
    "unit testing",
    "a binary heap",
    "dynamic programming",
    "a virtual environment",
    "type hints",
    "an iterator",
    "a context manager",
    "async and await",
    "a database index",
    "a SQL join",
    "regular expressions",
    "the observer pattern",
    "a trie",
    "merge sort",
    "quicksort",
    "breadth-first search",
    "a bloom filter",
    "immutability",
    "a lambda function",
    "exceptions",
    "a stack",
    "a queue",
    "caching",
    "a thread pool",
    "JSON serialization",
    "a bit mask",
    "floating-point rounding",
    "Unicode and UTF-8",
    "a shell pipeline",
    "git rebase",
]
_TASKS = [
    "reverses a string",
    "checks whether a number is prime",
    "merges two sorted lists",
    "counts the words in a text file",
    "finds the largest element of a list",
    "removes duplicates from a list while keeping the order",
    "computes the nth Fibonacci number",
    "parses a CSV line into fields",
    "flattens a nested list",
    "validates an email address",
    "converts Celsius to Fahrenheit",
    "groups a list of words by their first letter",
    "returns the median of a list",
    "checks whether a string is a palindrome",
    "reads a JSON file and prints its keys",
    "computes a running average",
    "rotates a matrix by 90 degrees",
    "finds all anagrams of a word in a list",
    "implements a simple LRU cache",
    "retries a function call with exponential backoff",
]
_LANGUAGES = ["Python", "Python", "Python", "JavaScript", "Go", "Rust", "C", "Java", "Bash"]
_PAIRS = [
    ("a list", "a tuple"),
    ("a process", "a thread"),
    ("TCP", "UDP"),
    ("SQL", "NoSQL"),
    ("a compiler", "an interpreter"),
    ("stack memory", "heap memory"),
    ("git merge", "git rebase"),
    ("an abstract class", "an interface"),
    ("deep copy", "shallow copy"),
    ("HTTP", "HTTPS"),
    ("concurrency", "parallelism"),
    ("a set", "a dictionary"),
    ("static typing", "dynamic typing"),
]
_GENERAL = [
    "photosynthesis",
    "the water cycle",
    "compound interest",
    "how vaccines work",
    "why the sky is blue",
    "how a bill becomes law",
    "the causes of the seasons",
    "supply and demand",
    "how airplanes stay in the air",
    "the scientific method",
]
_TEMPLATES = [
    "Explain {concept} to a beginner.",
    "Explain {concept}, with a short {language} example.",
    "What is {concept} and when should I use it?",
    "Write a {language} function that {task}.",
    "Write a {language} function that {task}, and explain how it works.",
    "How would you test a function that {task}?",
    "What is the difference between {a} and {b}?",
    "Give me three tips for using {concept} well.",
    "Explain {general} in simple terms.",
    "Write a short paragraph about {general}.",
    "What are common mistakes with {concept}?",
    "Show an example of {concept} in {language} and walk through it line by line.",
]


def chat_question(rng: random.Random) -> str:
    """One question a user might ask the coder model."""
    a, b = rng.choice(_PAIRS)
    return rng.choice(_TEMPLATES).format(
        concept=rng.choice(_CONCEPTS),
        language=rng.choice(_LANGUAGES),
        task=rng.choice(_TASKS),
        a=a,
        b=b,
        general=rng.choice(_GENERAL),
    )
