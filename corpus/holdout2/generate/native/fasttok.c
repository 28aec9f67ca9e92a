int fasttok_count(const char *s) { int n = 0; while (*s) n += *s++ == ' '; return n + 1; }
