#include <cstdio>

int main() {
  std::puts("kestrel: under construction");
  return 0;
}
