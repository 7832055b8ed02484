# SPDX-License-Identifier: MIT
"""When each worker got to a transfer: per transfer of a PINSTAGE_TRACE file
(after the first SKIP), its time, the microseconds from its start to each
worker's first block, the blocks the calling thread copied, and when the first
chunk's DMA was enqueued and landed (-1: not traced for uploads), the last
chunk's landing.  python3 arrivals.py TRACE [SKIP]"""
import sys, statistics as S
import tracefile
T,B,C=tracefile.read(sys.argv[1])
skip=int(sys.argv[2]) if len(sys.argv)>2 else 0
rows=[]
for i in sorted(T):
    if i<=skip: continue
    d,by,ch,seats,b,e=T[i]
    bl=B.get(i,[])
    first={}
    for k,th,cpu,s,en in bl:
        first[th]=min(first.get(th,1<<62),s)
    arr=sorted((v-b)/1e3 for th,v in first.items() if th!=0)
    ce=C.get(i,[])
    def ev(chunk,what):
        x=[a for c,w,a in ce if c==chunk and w==what]; return (x[0]-b)/1e3 if x else -1
    nb_caller=sum(1 for x in bl if x[1]==0); 
    rows.append(((e-b)/1e3,len(arr),arr,nb_caller,len(bl),ev(0,2),ev(0,3),ev(ch-1,3)))
    print(f"T{i} {d} {by} us {(e-b)/1e3:7.1f} seats {seats} workers {len(arr)} arrive {' '.join('%.0f'%a for a in arr)} | caller blocks {nb_caller}/{len(bl)} chunk0 enq {ev(0,2):.0f} landed {ev(0,3):.0f} last landed {ev(ch-1,3):.0f}")
