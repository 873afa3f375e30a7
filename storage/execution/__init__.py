"""Running queries over the engine: a query's plan run a bounded chunk at a time (execute), delete,
update and findAndModify (writes), blocking work under a memory limit (spill), and views. It may
import every part below it, up to engine; aggregate stands on it."""
