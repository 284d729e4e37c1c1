"""Tables: best runs, the paper table, the console summary and the JSON documents, and how numbers are written."""
