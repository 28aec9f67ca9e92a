int hshared_answer(void) { return 42; }
