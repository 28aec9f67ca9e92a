/* A small runtime library; the set's build links a program against it (needlib.c) under the
 * soname it gives, then removes it, so the dynamic loader refuses to start the program. */
int stub_entry(int n) { return n + 1; }
